"""A probe for torch's nightly level (tests/slow/test_torch_nightlies.py): it imports the environment's
torch, allocates a float32 tensor of 100 KiB, or of 400 KiB when the installed torch holds the marker file
``torch/_bisector_planted.txt`` (what the test plants in the wheels from one day on), and reports its
size as ``buffer_kib`` with the commit the build says it was made from (``torch.version.git_version``)."""
import json
import os

import torch

planted = os.path.exists(os.path.join(os.path.dirname(torch.__file__), "_bisector_planted.txt"))
buffer = torch.zeros((400 if planted else 100) * 256, dtype=torch.float32)
result = {"metrics": {"buffer_kib": buffer.numel() * buffer.element_size() / 1024},
          "device": {"type": "cpu"}, "versions": {"torch": torch.__version__},
          "torch_git": torch.version.git_version}
with open(os.environ["BISECTOR_RESULT"], "w") as fh:
    json.dump(result, fh)
