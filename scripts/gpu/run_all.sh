#!/usr/bin/env bash
# Run every GPU measurement script once, on a machine with a CUDA GPU, writing JSON files into OUT:
#     bash scripts/gpu/run_all.sh OUT [script ...]
# Each script gets its own time limit (GPU_LIMIT_<name>, seconds; perf needs about GPU_LIMIT_perf=600) so one slow
# part cannot starve the others.
# The JSON files are then copied to nsverify/data/gpu/ and committed; report sections read them from there.
# Pass the commit the run is made from as NSVERIFY_COMMIT=<hash>: a copied tree's .git can name an older HEAD.
set -u
out=${1:?usage: run_all.sh OUT [script ...]}
shift
scripts=("$@")
[ ${#scripts[@]} -gt 0 ] || scripts=(conventions zones optim costs perf)
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{ nvidia-smi -L; python3 -c 'import torch,sys; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'; } 2>&1 | tee "$out/gpu_env.txt"
for s in "${scripts[@]}"; do
  var="GPU_LIMIT_$s"; limit=${!var:-150}
  echo "=== $s (limit ${limit}s) $(date -u +%T)"
  start=$(date +%s)
  timeout "$limit" python3 "scripts/gpu/$s.py" --out "$out"
  echo "=== $s exit $? after $(( $(date +%s) - start ))s"
done 2>&1 | tee -a "$out/gpu_log.txt"
