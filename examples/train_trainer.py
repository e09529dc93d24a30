"""A transformers.Trainer script: gradient accumulation 2, 4 optimizer steps, a small Llama (random weights).
No memory code in it."""
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=1000, max_position_embeddings=2048)
model = LlamaForCausalLM(config)
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, config.vocab_size, (16, 64))]
args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2, gradient_accumulation_steps=2,
                         max_steps=4, learning_rate=1e-4, logging_steps=1, save_strategy="no", report_to=[])
Trainer(model=model, args=args, train_dataset=data).train()
