"""The plain Llama loop of train_llama.py under a launcher (torchrun --nproc_per_node 2 train_ddp.py):
DistributedDataParallel over gloo, each rank its own batches. No memory code in it."""
import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=1000, max_position_embeddings=2048)
model = torch.nn.parallel.DistributedDataParallel(LlamaForCausalLM(config))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
torch.manual_seed(1 + rank)
for step in range(4):
    ids = torch.randint(0, config.vocab_size, (2, 64))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print(f"rank {rank} step {step}: loss {loss.item():.4f}")
dist.destroy_process_group()
