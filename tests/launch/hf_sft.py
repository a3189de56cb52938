"""A training script built on the HF Trainer (trl's SFTTrainer), as people write them: no
tuner import. A tiny Llama is made from a config, the tokenizer and the data are local.

    tuner launch BUILD hf_sft.py --tokenizer DIR --out DIR [--lr 1e-4 --batch 2 --steps 4] [--save DIR]

--save DIR: `trainer.save_model(DIR/as-is)` as scripts write it, then, under FSDP, the one-line
fix `tuner launch` names for sharded builds and `trainer.save_model(DIR/fixed)`.

Each rank writes DIR/rank-<N>.json: the world the Trainer saw, accelerate's distributed type,
the steps done and the logged losses.
"""

import argparse
import json
import os

from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import SFTConfig, SFTTrainer

p = argparse.ArgumentParser()
p.add_argument("--tokenizer", required=True)
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--lr", type=float, default=1e-4)
p.add_argument("--save", default=None)
args = p.parse_args()

tok = PreTrainedTokenizerFast.from_pretrained(args.tokenizer)
if tok.pad_token is None:
    tok.pad_token = tok.eos_token or tok.unk_token
config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                     pad_token_id=tok.pad_token_id)
model = LlamaForCausalLM(config)
texts = [f"Sentence number {i} says that the {['red', 'green', 'blue'][i % 3]} box is open." for i in range(64)]
train = Dataset.from_list([{"text": t} for t in texts])

cfg = SFTConfig(
    output_dir=os.path.join(args.out, "trainer"), max_steps=args.steps, per_device_train_batch_size=args.batch,
    learning_rate=args.lr, logging_steps=1, save_strategy="no", report_to=[], max_length=32,
    dataset_text_field="text", seed=0, dataloader_num_workers=0, bf16=False,  # fp32: CPU ranks here
)
trainer = SFTTrainer(model=model, args=cfg, train_dataset=train, processing_class=tok)
trainer.train()

if args.save:
    trainer.save_model(os.path.join(args.save, "as-is"))
    if trainer.is_fsdp_enabled:
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(os.path.join(args.save, "fixed"))

acc = trainer.accelerator
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, f"rank-{acc.process_index}.json"), "w") as fh:
    json.dump({
        "process_index": acc.process_index,
        "num_processes": acc.num_processes,
        "args_world_size": trainer.args.world_size,
        "distributed_type": acc.distributed_type.name,
        "global_step": trainer.state.global_step,
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
        "is_fsdp": trainer.is_fsdp_enabled,
        "is_deepspeed": trainer.is_deepspeed_enabled,
        "zero_cpu_offload": bool(getattr(trainer.model_wrapped, "zero_cpu_offload", lambda: False)()),
        "ds_optimizer": type(getattr(getattr(trainer.model_wrapped, "optimizer", None), "optimizer", None)).__name__,
        "dtensor_params": sum(type(q).__name__ == "DTensor" for q in trainer.model_wrapped.parameters()),
        # What this rank holds: FSDP2's DTensor shards (local vs full size); ZeRO-1/2's partition
        # of the fp32 master weights (DeepSpeed's optimizer, inside the engine) vs the model's size.
        "numel": sum(q.numel() for q in trainer.model_wrapped.parameters()),
        "local_numel": sum(q.to_local().numel() if hasattr(q, "to_local") else q.numel()
                           for q in trainer.model_wrapped.parameters()),
        "zero_partition_numel": sum(t.numel() for t in getattr(getattr(trainer.model_wrapped, "optimizer", None),
                                                                 "single_partition_of_fp32_groups", [])),
    }, fh)
