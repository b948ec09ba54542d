#!/usr/bin/env bash
# GPU run 12c (device tool, one H200): the attention row again, PyTorch's attention called as
# nn.MultiheadAttention's default (need_weights=True, the attention matrix materialised, as in the
# burn model) and through its fused kernels (need_weights=False).
set -u
R50=configs/deeplabv3plus-r50-os8.toml
mkdir -p $OUT/r
S="--set model.attention_heads=8 --set model.aux_head=true"
python3 tools/pytorch/deeplabv3plus.py $R50 $S > $OUT/r/attn-torch-default.jsonl 2>&1; echo "default rc=$?"
python3 tools/pytorch/deeplabv3plus.py $R50 $S --fused-attention > $OUT/r/attn-torch-fused.jsonl 2>&1; echo "fused rc=$?"
tail -n1 $OUT/r/*.jsonl
