"""An XLM-R style SentencePiece tokenizer trained offline on the sample text.

XLM-RoBERTa's real tokenizer is a SentencePiece unigram model (``sentencepiece.bpe.model``)
whose ids are shifted by the fairseq convention: ``<s>``=0, ``<pad>``=1, ``</s>``=2,
``<unk>``=3, then the SentencePiece pieces from id 3 on, plus one, and ``<mask>`` last
(transformers ``XLMRobertaConverter``; keras-hub ``XLMRobertaTokenizer``). The proto trained
here uses the same layout as the original (``unk``=0, ``<s>``=1, ``</s>``=2, no pad piece),
so one file serves transformers (torch) and keras-hub (Keras) alike, and a real
``xlm-roberta-base`` checkpoint can replace it without code changes.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterable

SPM_FILE = "sentencepiece.bpe.model"  # the file name XLM-R checkpoints use
# The CSVs whose text trains the offline tokenizers (the torch side's "tiny-random" checkpoint and
# the Keras side's preset="tiny"), read in this order when present: the sample's names.
TOKENIZER_TEXT_FILES = ("train.csv", "validation.csv", "test.csv")


def tokenizer_training_texts(data_dir: str | Path) -> list[str]:
    """The text column of each of :data:`TOKENIZER_TEXT_FILES` in ``data_dir`` that exists, concatenated.

    Unsupervised use of the test text, as the real XLM-R vocabulary covers those languages too.
    Read with :func:`kitlib.data.read_csv_checked` (text column ``content`` or ``comment_text``;
    no torch, so the Keras side uses it too).

    Returns:
        ``[N]`` strings, file by file in that order, rows in file order.

    Raises:
        FileNotFoundError: none of the files is in ``data_dir``.
        ValueError: a file is unreadable or lacks an id or text column (naming the file).
    """
    from ..data import read_csv_checked

    texts: list[str] = []
    for name in TOKENIZER_TEXT_FILES:
        path = Path(data_dir) / name
        if path.is_file():
            texts += read_csv_checked(path)["text"].tolist()
    if not texts:
        raise FileNotFoundError(f"{data_dir}: no {', '.join(TOKENIZER_TEXT_FILES)} to train a tokenizer on")
    return texts


def train_sentencepiece(texts: Iterable[str], out_file: str | Path, vocab_size: int = 8000, seed_text_limit: int = 2_000_000) -> Path:
    """Train a unigram SentencePiece proto on ``texts`` and write it to ``out_file``.

    Args:
        texts: training sentences (any language; newlines inside a text are replaced by spaces).
        out_file: where to write the serialized ``ModelProto``.
        vocab_size: pieces in the model (``<unk>``, ``<s>``, ``</s>`` included). With too little
            text SentencePiece refuses a large vocabulary; the error then names the maximum.
        seed_text_limit: cap on characters fed to the trainer, to bound the time.

    Returns:
        ``out_file`` as a Path. Training is single-threaded and so deterministic for given text.
    """
    import sentencepiece as spm

    lines, total = [], 0
    for t in texts:
        t = " ".join(str(t).split())
        if t:
            lines.append(t)
            total += len(t)
            if total >= seed_text_limit:
                break
    if not lines:
        raise ValueError("train_sentencepiece: no non-blank text to train on")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=0.9995,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_bytes(buf.getvalue())
    return out_file


def xlmr_vocab(spm_file: str | Path) -> list[tuple[str, float]]:
    """The fairseq-shifted ``(piece, score)`` list that ``transformers.XLMRobertaTokenizer`` takes.

    Mirrors ``transformers.convert_slow_tokenizer.XLMRobertaConverter.vocab``.
    """
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_file))
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(3, sp.get_piece_size())]
    return [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), *pieces, ("<mask>", 0.0)]


def hf_tokenizer_from_spm(spm_file: str | Path):
    """A ``transformers.XLMRobertaTokenizer`` (tokenizers backend) built from an XLM-R style proto."""
    from transformers.models.xlm_roberta import XLMRobertaTokenizer

    return XLMRobertaTokenizer(vocab=xlmr_vocab(spm_file))
