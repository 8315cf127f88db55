#!/usr/bin/env bash
# Unpack the installed Snakemake's own test workflows (its sdist's tests/ folder, from the
# package index) into DIR, for tests/e2e/test_snakemake_workflows.py:
#   PYTHON=.venv/bin/python tests/snakemake_tests.sh DIR && export EXPOCLOUD_SNAKEMAKE_TESTS=DIR/tests
# Nothing of it enters this repository; the version is the installed one, so the workflows
# match the Snakemake that runs them.
set -euo pipefail
DIR=${1:?usage: tests/snakemake_tests.sh DIR}
PY=${PYTHON:-python3}
VERSION=$("$PY" -c 'import snakemake; print(snakemake.__version__)')
if [ -f "$DIR/tests/tests.py" ] && [ "$(cat "$DIR/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  echo "snakemake $VERSION tests already in $DIR/tests"; exit 0
fi
mkdir -p "$DIR/download"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
  -d "$DIR/download" "snakemake==$VERSION"
rm -rf "$DIR/tests" "$DIR/unpacked" && mkdir -p "$DIR/unpacked"
tar -xzf "$DIR/download/snakemake-$VERSION.tar.gz" -C "$DIR/unpacked"
mv "$DIR/unpacked/snakemake-$VERSION/tests" "$DIR/tests"
rm -rf "$DIR/unpacked" "$DIR/download"
echo "$VERSION" > "$DIR/VERSION"
echo "snakemake $VERSION tests in $DIR/tests"
