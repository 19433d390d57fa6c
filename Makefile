# The two commands of the README:  make lab  (set up, then start JupyterLab)  and  make test.
# Setup is a virtual environment in .venv with a CUDA build of PyTorch from PyPI;
# it runs once and again only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: setup lab test doctor
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[lab,dev]'
	@$(PY) -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' is a CPU-only build: the course needs a CUDA build (pip install --force-reinstall torch from PyPI)')"
	$(PY) -m grader doctor || true
	touch $@

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

test: setup
	$(PY) -m pytest

doctor: setup
	$(PY) -m grader doctor
