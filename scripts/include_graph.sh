#!/usr/bin/env bash
# Prints the include graph of fitsum's library folders (include/fitsum/<folder> and src/<folder>) in Graphviz DOT:
# one edge per pair of folders where the first includes a header of the second. `| dot -Tsvg > graph.svg` draws it;
# docs/architecture.md has the layer table the edges must follow (checked by tests/unit/architecture_test.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "digraph fitsum {"
echo "  rankdir=BT;"
for dir in include/fitsum/*/; do
  folder=$(basename "$dir")
  grep -rhoE '#include "fitsum/[a-z_0-9]+/' "include/fitsum/$folder" "src/$folder" 2>/dev/null |
    sed -E 's|#include "fitsum/([a-z_0-9]+)/|\1|' | sort -u | while read -r used; do
      if [[ "$used" != "$folder" ]]; then echo "  $folder -> $used;"; fi
    done
done
echo "}"
