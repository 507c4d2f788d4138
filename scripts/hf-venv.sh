#!/usr/bin/env bash
# Creates the Python environment of `make test-hf`: a virtual environment in BUILD_DIR/hf-venv (HF_TORCH=debian,
# the default: Debian's python3-torch 1.13 through --system-site-packages, transformers 4.47.1) or BUILD_DIR/hf-venv-pip
# (HF_TORCH=pip: torch and the newest transformers from PyPI). Installs python3-torch with apt when missing. Idempotent:
# a venv whose requirements file is unchanged is reused. Prints the venv's python on the last line.
set -euo pipefail
build_dir=${1:?usage: scripts/hf-venv.sh BUILD_DIR [debian|pip]}
flavour=${2:-debian}
root=$(cd "$(dirname "$0")/.." && pwd)
case "$flavour" in
  debian) venv="$build_dir/hf-venv"; requirements="$root/tests/hf/requirements-torch113.txt" ;;
  pip) venv="$build_dir/hf-venv-pip"; requirements="$root/tests/hf/requirements-torch-pip.txt" ;;
  *) echo "hf-venv: HF_TORCH must be debian or pip, not '$flavour'" >&2; exit 2 ;;
esac

need=(python3-venv python3-pip)
[[ "$flavour" == debian ]] && need+=(python3-torch python3-numpy)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "hf-venv: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

stamp="$venv/.fitsum-requirements"
if [[ -x "$venv/bin/python" ]] && cmp -s "$requirements" "$stamp"; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
# Debian's python (not a user's pyenv or conda): python3-torch lives in its dist-packages.
if [[ "$flavour" == debian ]]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
else
  /usr/bin/python3 -m venv "$venv"
fi
start=$(date +%s)
if [[ "$flavour" == debian ]]; then
  # Every package is pinned in the file; resolving them again would replace Debian's torch, whose version
  # (1.13.0a0) is a pre-release below the torch >= 1.13 that peft declares, with PyPI's newest.
  "$venv/bin/python" -m pip install -q --no-deps -r "$requirements" >&2
else
  "$venv/bin/python" -m pip install -q -r "$requirements" >&2
fi
if [[ "$flavour" == debian ]]; then
  # Debian's torch 1.13 under Python 3.11 needs one upstream fix to import transformers' Trainer (see the file).
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$root/tests/hf/torch113_py311_compat.py" "$site/"
  echo "import torch113_py311_compat" > "$site/torch113_py311_compat.pth"
fi
"$venv/bin/python" - "$flavour" >&2 <<'PY'
import sys
import torch, transformers
print(f"hf-venv: torch {torch.__version__} from {torch.__file__}, transformers {transformers.__version__}")
if sys.argv[1] == "debian" and not torch.__file__.startswith("/usr/lib/python3/dist-packages/"):
    sys.exit("hf-venv: the debian venv must use Debian's python3-torch, not one installed from PyPI")
from transformers import Seq2SeqTrainer  # noqa: F401  (fails here rather than in every test)
PY
echo "hf-venv: installed in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) on disk" >&2
cp "$requirements" "$stamp"
echo "$venv/bin/python"
