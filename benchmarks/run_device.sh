#!/usr/bin/env bash
# One session on a GPU machine with many cores. The GPU figures (benchmarks/run_gpu.sh) run on
# cores 10 and up while CPU measurements run beside them, each on 2 pinned cores with the GPU
# hidden, like the course's 2-core reference machine:
#   cores 0-1  benchmarks/bench_training.py        cores 2-3  notebook 08, full budget
#   cores 4-5  python -m solutions_lib.train       cores 6-7  python -m solutions_lib.gpt train
#   cores 8-9  benchmarks/bench_gpt.py
#   bash benchmarks/run_device.sh OUTDIR
#   ONLY="train_cli gpt_train" bash benchmarks/run_device.sh OUTDIR   # some of them (ONLY_CPU, ONLY_GPU: one side)
set -u
out=${1:-device-results}
mkdir -p "$out/cpu"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
py=${PYTHON:-python3}
on_2_cores() {  # on_2_cores FIRST_CORE NAME COMMAND...
    local first=$1 name=$2; shift 2
    [[ -z "${ONLY_CPU:-${ONLY:-}}" || " ${ONLY_CPU:-${ONLY:-}} " == *" $name "* ]] || return 0
    CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 timeout 480 \
        taskset -c "$first,$((first + 1))" "$@" > "$out/cpu/$name.txt" 2>&1 &
}
on_2_cores 0 bench_training $py benchmarks/bench_training.py --mode both
on_2_cores 2 notebook_08 $py benchmarks/notebook_as_script.py solutions/08_training_a_transformer/08_training_a_transformer.ipynb
on_2_cores 4 train_cli $py -m solutions_lib.train --no-progress --checkpoint /tmp/dates.pt
on_2_cores 6 gpt_train $py -m solutions_lib.gpt train --no-progress --checkpoint /tmp/gpt-cpu.pt
on_2_cores 8 bench_gpt $py benchmarks/bench_gpt.py
taskset -c 10-$(($(nproc) - 1)) bash benchmarks/run_gpu.sh "$out/gpu"
wait
for f in "$out"/cpu/*.txt; do
    echo "=== CPU, 2 pinned cores: $f"
    grep -v '%|' "$f" | tail -n 7
done
