#!/bin/sh
# The exact command that produced shipped.npz (and shipped_loss.json/.png/.html, shipped_metrics.json).
# One BLAS thread: OpenBLAS splits sums differently for other thread counts, which changes the last bits.
# With the same numpy (2.2.5) on the same machine it reproduces the weights bit for bit; to check without
# overwriting: add  --out /tmp/again.npz --verify-against py/slm/weights/shipped.npz
set -eu
cd "$(dirname "$0")/../../.."
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONPATH=py exec python -m slm.train \
  --seed 0 --n-layers 2 --n-heads 8 --n-model 64 --n-ctx 32 --activation relu --positions rope \
  --steps 12000 --batch-size 32 --lr 0.003 --warmup 100 --min-lr-fraction 0.1 --weight-decay 0.1 --clip 1.0 \
  --dtype float32 --train-tokens 1000000 --valid-tokens 100000 --eval-every 200 --eval-windows 256 \
  --out py/slm/weights/shipped.npz "$@"
