# Sourced by bench/infinity.sh and bench/offload_modes.sh after they set their defaults: reads
# --layers --channels --heads --seq --steps --ranks --dir --sub-group into those variables, and
# builds zero-train when it is missing.
while [[ $# -gt 0 ]]; do
  case $1 in
    --layers) layers=$2 ;;
    --channels) channels=$2 ;;
    --heads) heads=$2 ;;
    --seq) seq=$2 ;;
    --steps) steps=$2 ;;
    --ranks) ranks=$2 ;;
    --dir) dir=$2 ;;
    --sub-group) sub_group=$2 ;;
    *) echo "$(basename "$0"): unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x build/apps/zero-train ]] || scripts/bootstrap
