"""One DeepSpeed training loop for LM objectives (midtrain, sft): data, packing, loop."""
