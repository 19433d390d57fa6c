# The two commands of the README:  make lab  (set up, then start JupyterLab)  and  make test.
# Setup is a virtual environment in .venv with a CUDA build of PyTorch from PyPI;
# it runs once and again only when pyproject.toml changes.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

# JupyterLab as `make lab` starts it (tests/test_browser.py starts it the same way, through make):
# rooted at the course, so notebooks/ and kernels/ are both in its file browser; opening on Day 1;
# with the course's Lab extension and settings (lab/labextensions: .cu and .cuh as C++, 2-space
# indent); --allow-root where it runs as root, as on most GPU cloud images. LAB_ARGS adds options,
# e.g. make lab LAB_ARGS="--no-browser --port=8899" (on a remote GPU machine, then
# ssh -L 8899:localhost:8899 that-machine and open the printed URL on your own computer).
DAY1     := notebooks/day01_cuda_model_and_jit.ipynb
LAB_ARGS ?=
LAB_CMD   = $(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
	--LabApp.default_url=/lab/tree/$(DAY1) \
	--LabApp.extra_labextensions_path="$(CURDIR)/lab/labextensions" \
	$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)
EX ?= day01.scale_add

.PHONY: setup lab test doctor check list flashinfer site
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "Setting up $(VENV): PyTorch with CUDA, JupyterLab and the course's tools (about 3.2 GB to download, 5.9 GB on disk; once)..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[lab,dev]'
	@$(PY) -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' is a CPU-only build: the course needs a CUDA build (pip install --force-reinstall torch from PyPI)')"
	$(PY) -m grader doctor || true
	touch $@

lab: setup
	@echo "Starting JupyterLab on Day 1 ($(DAY1)), rooted at $(CURDIR). Open the http://...?token=... URL it prints below; Ctrl-C stops it."
	$(LAB_CMD)

test: setup
	$(PY) -m pytest -n 2 --dist loadfile --durations=15

# The executed notebooks of site/executed/ as a static site in site/_build/ (open site/_build/index.html).
# No GPU needed. The copies themselves come from `python -m grader.maintain.site execute` (docs/maintainers.md).
site: setup
	$(PY) -m grader.maintain.site build

# FlashInfer, the optional extra that the notebooks time beside your kernels (about 120 MB).
flashinfer: setup
	$(PY) -m pip install --quiet -e '.[flashinfer]'

doctor: setup
	$(PY) -m grader doctor

# The grader with the course's interpreter: make check EX=day02.silu_and_mul
check: setup
	$(PY) -m grader check $(EX)

list: setup
	$(PY) -m grader list
