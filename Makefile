# Thin wrappers over scripts/dev.sh; PYTHON=... picks the interpreter, ARGS=... is passed on
# (e.g. `make demo ARGS=--full` runs the complete benchmark).
.PHONY: demo test bench docs docs-bench typecheck clean

demo:
	scripts/dev.sh demo $(ARGS)

test:
	scripts/dev.sh test $(ARGS)

bench:
	scripts/dev.sh bench $(ARGS)

# mypy (strict, over src/zarrdb) and stubtest (the compiled engine against src/zarrdb/_core.pyi)
typecheck:
	scripts/dev.sh typecheck $(ARGS)

# the documentation site, into site/ (mkdocs build --strict)
docs:
	scripts/dev.sh docs $(ARGS)

# the benchmark page's figures (docs/benchmarks/): `zarrdb bench --full` on this machine
docs-bench:
	scripts/dev.sh docs-bench $(ARGS)

clean:
	rm -rf build dist wheelhouse site src/zarrdb/_core.c src/zarrdb/*.so src/*.egg-info
