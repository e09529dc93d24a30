"""A transformers.Trainer script: gradient accumulation 4 over padded sequences of different lengths, plain SGD,
no gradient clipping (max_grad_norm=0), 2 optimizer steps, a small Llama (random weights, tied embeddings). No
numerics code in it. The long sequences repeat one token, which even random tied weights predict better than the
random tokens of the short ones: as in real text, how the loss is averaged over tokens matters."""
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=1000, max_position_embeddings=256, tie_word_embeddings=True)
model = LlamaForCausalLM(config)
data = []
for length in [6, 60, 9, 51, 4, 57, 12, 44, 7, 63, 10, 48, 5, 55, 8, 40]:
    ids = torch.randint(1, config.vocab_size, (64,))
    if length > 32:
        ids[:] = ids[0]
    mask = torch.arange(64) < length   # padded to 64 tokens: only the first `length` are text
    data.append({"input_ids": ids * mask, "attention_mask": mask.long(), "labels": torch.where(mask, ids, -100)})
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=1, gradient_accumulation_steps=4,
                         max_steps=2, optim="sgd", learning_rate=1e-2, max_grad_norm=0, logging_steps=1,
                         save_strategy="no", report_to=[])
Trainer(model=model, args=args, train_dataset=data).train()
