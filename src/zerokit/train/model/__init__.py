"""The model of a run and its switches: loading (the tokenizer and the model: loaded, built from a config, wrapped
for fine-tuning; the block size it takes), lora (LoRA and last-layer training), fused_loss (the cross-entropy
without the vocabulary's logits), switches (attention, compile, cross-entropy and dropout, checked before torch).
"""
