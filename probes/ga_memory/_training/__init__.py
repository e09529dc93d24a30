"""The training loops a cell measures (``accelerate_loop``: accelerate's hand-written loop and what both
loops share; ``trainer_loop``: ``transformers.Trainer``) and the proof of the precision a cell ran in
(``precision``)."""
