"""Where a model comes from and what it can take: checkpoints, model kinds (encoder, decoder, answer tokens), adapters, memory plans."""
