import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

import kite  # noqa: E402
import kite.torch  # noqa: E402,F401  (registers torch.ops.kite)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _fresh_config_and_seed():
    torch.manual_seed(0)
    before = kite.config(None)
    yield
    kite.config(before or None)


def pytest_report_header(config):
    return [f"kite {kite.__version__} from {os.path.dirname(kite.__file__)}; devices {DEVICES}"]
