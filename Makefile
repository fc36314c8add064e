# Thin wrappers over scripts/dev.sh; PYTHON=... picks the interpreter.
.PHONY: demo test bench clean

demo:
	scripts/dev.sh demo

test:
	scripts/dev.sh test

bench:
	scripts/dev.sh bench

clean:
	rm -rf build dist wheelhouse src/zarrdb/_core.c src/zarrdb/*.so src/*.egg-info
