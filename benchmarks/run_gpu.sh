#!/usr/bin/env bash
# Every GPU figure of docs/MEASURED-TRAINING.md in one run (python3 with a CUDA build of torch; no Jupyter needed):
#   bash benchmarks/run_gpu.sh OUTDIR
#   ONLY="train_cli gpt_train" bash benchmarks/run_gpu.sh OUTDIR     # some of them
set -u
out=${1:-gpu-results}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
py=${PYTHON:-python3}
step() {  # step NAME SECONDS COMMAND...: run with a time limit, keep the output in OUTDIR/NAME.txt
    local name=$1 limit=$2; shift 2
    [[ -z "${ONLY_GPU:-${ONLY:-}}" || " ${ONLY_GPU:-${ONLY:-}} " == *" $name "* ]] || return 0
    echo "=== $name: $*"
    timeout "$limit" "$@" 2>&1 | grep -v '^\s*$' | tee "$out/$name.txt" | grep -v '%|' | tail -n 12
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
# bfloat16 (the rule's choice on an A100, H100 or H200), then float16 with the gradient scaler, a T4's path
# (SEQCOURSE_PRECISION=float16): notebooks 08, 10 and 11 and both commands, each path's figures for docs/MEASURED-TRAINING.md
# and for the RECIPES and MODERN_RECIPES of course_lib/gpt_training.py (gpt_train: notebook 11's recipe, the command's
# default; gpt_train_10: notebook 10's). On a lease of 15 minutes, in two calls: ONLY="train_cli gpt_train gpt_train_10
# notebook_11 notebook_10 notebook_08" first, then ONLY="train_cli_fp16 gpt_train_fp16 notebook_11_fp16 notebook_10_fp16 notebook_08_fp16".
step train_cli 60 $py -m solutions_lib.train --no-progress --checkpoint /tmp/gpu-dates.pt
step gpt_train 90 $py -m solutions_lib.gpt train --no-progress --eval-every 250 --checkpoint /tmp/gpu-gpt.pt
step gpt_train_10 90 $py -m solutions_lib.gpt train --model gpt --no-progress --eval-every 250 --checkpoint /tmp/gpu-gpt10.pt
step gpt_sample 30 $py -m solutions_lib.gpt sample --checkpoint /tmp/gpu-gpt.pt --prompt "ROMEO:" --temperature 0.8 --top-k 40
step notebook_11 300 $py benchmarks/notebook_as_script.py solutions/11_a_gpt_as_trained_today/11_a_gpt_as_trained_today.ipynb
step notebook_10 200 $py benchmarks/notebook_as_script.py solutions/10_a_gpt_of_your_own/10_a_gpt_of_your_own.ipynb
step notebook_08 150 $py benchmarks/notebook_as_script.py solutions/08_training_a_transformer/08_training_a_transformer.ipynb
step train_cli_fp16 60 env SEQCOURSE_PRECISION=float16 $py -m solutions_lib.train --no-progress --checkpoint /tmp/gpu-dates.pt
step gpt_train_fp16 90 env SEQCOURSE_PRECISION=float16 $py -m solutions_lib.gpt train --no-progress --eval-every 250 --checkpoint /tmp/gpu-gpt.pt
step notebook_11_fp16 300 env SEQCOURSE_PRECISION=float16 $py benchmarks/notebook_as_script.py solutions/11_a_gpt_as_trained_today/11_a_gpt_as_trained_today.ipynb
step notebook_10_fp16 200 env SEQCOURSE_PRECISION=float16 $py benchmarks/notebook_as_script.py solutions/10_a_gpt_of_your_own/10_a_gpt_of_your_own.ipynb
step notebook_08_fp16 150 env SEQCOURSE_PRECISION=float16 $py benchmarks/notebook_as_script.py solutions/08_training_a_transformer/08_training_a_transformer.ipynb
step bench_gpt 150 $py benchmarks/bench_gpt.py --eval-every 250
step bench_training 200 $py benchmarks/bench_training.py --mode both
step bench_attention 60 $py benchmarks/bench_attention.py
step bench_layers 90 $py benchmarks/bench_transformer_layers.py --device cuda
rm -f /tmp/gpu-dates.pt /tmp/gpu-gpt.pt /tmp/gpu-gpt10.pt  # checkpoints stay out of OUTDIR: only the figures come back
