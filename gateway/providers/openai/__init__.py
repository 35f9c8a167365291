"""OpenAI-compatible providers (OpenAI, Azure OpenAI, vLLM, Ollama, DeepSeek, …) behind the
Messages API: pure translators Anthropic Messages ⇄ Chat Completions
(docs/providers.md, section 7).

- request.py  Messages request  -> Chat Completions request (`to_chat`)
- stream.py   chat.completion.chunk SSE bytes -> Anthropic stream events (`ChatStreamDecoder`)
- reply.py    chat.completion -> Anthropic Message (`to_message`)
- errors.py   the provider's error answers -> GatewayError (`provider_error`)
- tokens.py   count_tokens computed locally (`count_input_tokens`)
- mapping.py  the rules stream.py and reply.py share (stop reasons, usage, signatures)

No Django, no I/O, no clock: plain functions and classes over dicts and bytes.
"""
