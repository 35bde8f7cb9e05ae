# Sourced by the .ci scripts. find_python X.Y prints the newest CPython X.Y
# that pyenv has (or pythonX.Y on PATH); when there is none it says how to
# get it, on stderr, and fails.
find_python() {
    local v=$1 root cand
    root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
    cand=$( (ls -d "$root"/versions/"$v".*/bin/python"$v" 2>/dev/null || true) | sort -V | tail -n 1)
    if [ -z "$cand" ] && command -v "python$v" >/dev/null && "python$v" -c '' 2>/dev/null; then
        cand=$(command -v "python$v")
    fi
    if [ -z "$cand" ] || [ ! -x "$cand" ]; then
        echo "python$v not found (looked in $root/versions and PATH): 'pyenv install $v'" >&2
        return 1
    fi
    echo "$cand"
}
