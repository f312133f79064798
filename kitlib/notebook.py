"""``python -m kitlib.notebook IN.ipynb OUT.ipynb [papermill options]``: papermill, with a failure in one short block.

papermill's own command line (every option: ``-p``, ``-r``, ``--cwd``, ``-k``, ``--log-output``, ...)
runs the notebook. When a cell raises, papermill ends with a 40-80-line traceback in which the kit's
own message (a refused parameter, a fold missing, a folder held by another run) is hard to find.
Here that failure is one block on stderr::

    error: UnknownParameterError: unknown parameter 'save_every_steps': ... (did you mean 'save_every_minutes'?)
      (cell 3 of notebooks/xla_ddp_train.ipynb failed; the whole traceback is in outputs/xla_ddp_train.ipynb)

and the exit status is 1. The traceback is kept: papermill writes it into the output notebook.
Anything else (usage errors, ``--help``, a dead kernel's exit 138) is papermill's.
"""
from __future__ import annotations

import sys

PROG = "python -m kitlib.notebook"


def error_block(e, notebook: str, output: str) -> str:
    """The short message for a :class:`papermill.PapermillExecutionError` ``e``: the exception's
    class and message (the kit's refusal, as raised), and where the whole traceback is."""
    message = str(e.evalue).strip() or "(no message)"
    where = f"the whole traceback is in {output}" if output and output != "-" else "papermill printed no output notebook"
    return f"error: {e.ename}: {message}\n  (cell {e.exec_count} of {notebook} failed; {where})"


def main(argv: list[str] | None = None) -> int:
    """Run papermill's command line on ``argv``; a failed cell is printed by :func:`error_block`.

    Returns:
        0, 1 when a cell failed, or papermill's (click's) own exit status.
    """
    import click
    from papermill.cli import papermill as cli
    from papermill.exceptions import PapermillExecutionError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with cli.make_context(PROG, args) as ctx:
            cli.invoke(ctx)
    except PapermillExecutionError as e:
        print(error_block(e, ctx.params.get("notebook_path"), ctx.params.get("output_path")), file=sys.stderr, flush=True)
        return 1
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
