"""The playground showing a random model of GPT-2 small's shape (12 layers × 12 heads, GPT-2's 50,257 vocabulary
entries), for test_browser_big_views.py: `panel serve tests/playground/big_app.py`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from big_models import GPT2_VOCAB, big_model  # noqa: E402

from playground.app import create_app  # noqa: E402

playground = create_app()
playground.state.add_model(big_model("gpt2-small", GPT2_VOCAB), "loaded")  # shown at once, whatever the link's model
playground.root.servable(title="Transformer playground: GPT-2 small's shape")
