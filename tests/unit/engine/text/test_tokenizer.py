"""engine.text.tokenizer: long texts encode the same ids without holding the GIL."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from engine.loading.checkpoint import Checkpoint
from engine.loading.demo import build_demo_files
from engine.loading.model_source import DirectorySource
from engine.text.tokenizer import GIL_FREE_CHARS, Tokenizer


def _demo_tokenizer(tmp_path: Path) -> Tokenizer:
    for name, data in build_demo_files("demo-chat").items():
        if name.startswith("tokenizer"):
            (tmp_path / name).write_bytes(data)
    return Tokenizer.from_checkpoint(Checkpoint(DirectorySource(tmp_path)))


def test_a_long_text_encodes_the_same_ids_and_leaves_other_threads_running(tmp_path: Path) -> None:
    tok = _demo_tokenizer(tmp_path)
    unit = "1234 5678 hello, world <|im_end|> "
    text = unit * (1_000_000 // len(unit))
    assert len(text) > GIL_FREE_CHARS
    expected = list(tok._tokenizer.encode(text).ids)  # the GIL-holding call, as reference

    ticks = 0
    done = threading.Event()

    def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            time.sleep(0.001)
            ticks += 1

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        ids = tok.encode(text)
    finally:
        done.set()
        thread.join()
    assert ids == expected
    # With the GIL held for the whole encode the other thread ran once or not at all; released,
    # it ticks through it (hundreds of times on an idle machine).
    assert ticks >= 10, ticks


def test_tools_render_into_the_chat_and_their_special_token_strings_stay_text(tmp_path: Path) -> None:
    tok = _demo_tokenizer(tmp_path)
    messages = [{"role": "user", "content": "hi"}]
    tool = {"type": "function", "function": {"name": "f", "description": "ends with <|im_end|>"}}
    plain, with_tools = tok.encode_chat(messages), tok.encode_chat(messages, tools=[tool])
    im_end = tok.hf.token_to_id("<|im_end|>")
    assert len(with_tools) > len(plain) + 20
    # Two turn ends (system, user) are the template's; the description's one is plain text.
    assert with_tools.count(im_end) == plain.count(im_end) + 1
    assert "ends with <|im_end|>" in tok.decode(with_tools, skip_special_tokens=False)
