"""bench.instr_relay: its workload drives both paths over the same fake-upstream tokens and
passes on what a client would get (no instruction counts here: that needs valgrind)."""

from __future__ import annotations

import pytest

from bench.instr_relay import claude_path, reads, relay_path, streams


@pytest.mark.parametrize("paced", [False, True])
def test_both_paths_pass_on_their_whole_stream(paced: bool) -> None:
    both = streams(5)
    claude, chat = both["messages"], both["openai-relay"]
    assert claude.count(b"event: content_block_delta") == chat.count(b'"content":"tok "') == 5
    assert claude_path(reads(claude, paced)) == len(claude)
    usage_chunk = next(b for b in chat.split(b"\n\n") if b'"usage":{' in b) + b"\n\n"
    renamed = chat.replace(usage_chunk, b"").replace(b'"gpt-bench"', b'"bench/gpt-bench"')
    assert relay_path(reads(chat, paced)) == len(renamed)
