"""A tiny language model's source for ``--model-factory`` tests: embedding, ReLU layers, a head.

With ``keep_activations`` it carries a planted activation regression: an fp32 copy of every layer's
output stays alive until the loss."""
from __future__ import annotations

TEMPLATE = '''import torch
from types import SimpleNamespace

KEEP = {keep}


class TinyLM(torch.nn.Module):
    def __init__(self, hidden, layers, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(layers))
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, labels):
        x = self.embed(input_ids)
        kept = []
        for layer in self.layers:
            x = torch.relu(layer(x))
            if KEEP:  # the planted regression: an fp32 copy of every activation, alive until the loss
                kept.append(x.detach().float().clone())
        loss = torch.nn.functional.cross_entropy(self.head(x).flatten(0, 1).float(), labels.flatten())
        if KEEP:
            loss = loss + 0 * sum(k.sum() for k in kept)
        return SimpleNamespace(loss=loss)


def build(hidden, layers, heads, vocab, max_positions, use_cache):
    return TinyLM(hidden, layers, vocab)
'''


def tiny_lm_source(keep_activations: bool = False) -> str:
    """The module's source; ``build`` is its model factory (``--model-factory=<module>:build``)."""
    return TEMPLATE.format(keep=keep_activations)
