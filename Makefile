# The two commands of the README. Everything else is in scripts/.
.PHONY: run test lint bench

run:
	bash scripts/quickstart.sh

test:
	bash scripts/test.sh

lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

bench:
	.venv/bin/python -m bench.run
