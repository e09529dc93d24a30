"""A plain accelerate training loop: bf16 autocast, no gradient accumulation, a small Llama (random
weights). No memory code in it."""
import torch
from accelerate import Accelerator
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
accelerator = Accelerator(mixed_precision="bf16")
config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=1000, max_position_embeddings=2048)
model = LlamaForCausalLM(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(4):
    ids = torch.randint(0, config.vocab_size, (2, 64), device=accelerator.device)
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step}: loss {loss.item():.4f}")
