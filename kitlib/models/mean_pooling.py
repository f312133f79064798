"""The mean-pooled BERT classifier (multilingual-e5): a module of its own so that :mod:`kitlib.models.model`
imports no torch or transformers at module import (its base class needs both at definition)."""
from __future__ import annotations

import torch
from transformers.modeling_outputs import SequenceClassifierOutput
from transformers.models.bert.modeling_bert import BertModel, BertPreTrainedModel


class BertMeanPooledClassifier(BertPreTrainedModel):
    """A BERT body, mean pooling over the real tokens, dropout and one ``Linear``: the E5 way.

    E5 was trained for mean pooling and ships no pooler (an untrained pooler head nearly collapsed, issue 18).
    Loads a ``BertModel`` folder (the head then comes up new) or its own fine-tuned checkpoint
    (``save_pretrained``: ``bert.*`` and ``classifier.*``).

    ``forward(input_ids [batch, len] int64, attention_mask [batch, len])`` returns a
    ``SequenceClassifierOutput`` whose ``logits`` are ``[batch, num_labels]``.
    """

    def __init__(self, config):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = torch.nn.Dropout(config.hidden_dropout_prob)
        self.classifier = torch.nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state
        mask = (torch.ones_like(input_ids) if attention_mask is None else attention_mask).unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return SequenceClassifierOutput(logits=self.classifier(self.dropout(pooled)))
