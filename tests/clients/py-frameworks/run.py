"""Python client frameworks against the gateway, run in this directory's own virtualenv.

Usage: .venv/bin/python run.py <scenario>; env EZAT_BASE_URL (.../openai/v1), EZAT_API_KEY,
EZAT_MODEL. Prints one JSON object with what the framework returned; tests/e2e checks it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

BASE_URL = os.environ["EZAT_BASE_URL"]
API_KEY = os.environ["EZAT_API_KEY"]
MODEL = os.environ["EZAT_MODEL"]


def agents_tool() -> dict[str, Any]:
    """The OpenAI Agents SDK: Runner.run with a function tool over the Responses API."""
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI
    from openai.types.shared import Reasoning

    set_tracing_disabled(True)  # tracing would export to OpenAI's servers
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"9°C in {city}"

    client = AsyncOpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0)
    store = os.environ.get("EZAT_STORE")
    settings = ModelSettings(
        reasoning=Reasoning(effort="high"),
        store=None if store is None else store == "true",
        response_include=["reasoning.encrypted_content"] if store == "false" else None,
    )
    agent = Agent(
        name="weather",
        instructions="Answer with the tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=settings,
    )
    result = asyncio.run(Runner.run(agent, "Weather in Oslo?"))
    return {
        "final_output": result.final_output,
        "tool_calls": calls,
        "items": [item.type for item in result.new_items],
        "responses": [r.response_id for r in result.raw_responses],
    }


def _agent(**kw: Any) -> Any:
    """An Agents SDK agent on the Responses API through the gateway (tracing off: it would
    export to OpenAI's servers)."""
    from agents import Agent, OpenAIResponsesModel, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(
        base_url=BASE_URL, api_key=os.environ.get("EZAT_AGENT_KEY", API_KEY), max_retries=0
    )
    model = os.environ.get("EZAT_AGENT_MODEL", MODEL)
    return Agent(
        name=kw.pop("name", "helper"),
        model=OpenAIResponsesModel(model=model, openai_client=client),
        **kw,
    )


def agents_plain() -> dict[str, Any]:
    """Runner.run with no tools: one Responses call, its text the final output."""
    from agents import Runner

    result = asyncio.run(Runner.run(_agent(instructions="Be brief."), "Say hello"))
    return {
        "final_output": result.final_output,
        "responses": [r.response_id for r in result.raw_responses],
    }


def agents_stream() -> dict[str, Any]:
    """Runner.run_streamed: the text deltas as the SDK surfaces them, and the final output."""
    from agents import Runner
    from openai.types.responses import ResponseTextDeltaEvent

    async def run() -> dict[str, Any]:
        result = Runner.run_streamed(_agent(), "Tell me a long answer")
        deltas: list[str] = []
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                deltas.append(event.data.delta)
        return {
            "deltas": deltas,
            "final_output": result.final_output,
            "responses": [r.response_id for r in result.raw_responses],
        }

    return asyncio.run(run())


def agents_structured() -> dict[str, Any]:
    """An agent with `output_type`: the SDK sends a strict JSON schema and parses the answer."""
    from agents import Runner
    from pydantic import BaseModel

    class City(BaseModel):
        city: str
        population: int

    result = asyncio.run(Runner.run(_agent(output_type=City), "Largest city in Norway?"))
    return {
        "final_output": result.final_output.model_dump(),
        "type": type(result.final_output).__name__,
    }


def agents_errors() -> dict[str, Any]:
    """A wrong key and an unknown model, as the Agents SDK raises them (openai's errors)."""
    import openai
    from agents import Runner

    out: dict[str, Any] = {}
    for case, env in (("wrongKey", "EZAT_AGENT_KEY"), ("unknownModel", "EZAT_AGENT_MODEL")):
        os.environ[env] = "ezat_sk_wrong" if case == "wrongKey" else "no-such-model"
        try:
            asyncio.run(Runner.run(_agent(), "Hi"))
        except openai.APIStatusError as exc:
            out[case] = {"status": exc.status_code, "type": type(exc).__name__}
        finally:
            del os.environ[env]
    return out


def agents_files() -> dict[str, Any]:
    """The agent conformance suite's loop (tests/e2e/test_agents_openai_sdk.py): function tools
    that write, read and patch a file in EZAT_WORKDIR, beside the hosted WebSearchTool (which
    the gateway drops); Runner.run, or Runner.run_streamed when EZAT_STREAM=1."""
    from pathlib import Path

    from agents import Runner, WebSearchTool, function_tool

    work = Path(os.environ["EZAT_WORKDIR"])
    calls: list[str] = []

    @function_tool
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        calls.append("write_file")
        (work / path).write_text(content)
        return f"wrote {len(content)} characters to {path}"

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        calls.append("read_file")
        return (work / path).read_text()

    @function_tool
    def patch_file(path: str, old: str, new: str) -> str:
        """Replace text in a file."""
        calls.append("patch_file")
        target = work / path
        target.write_text(target.read_text().replace(old, new))
        return f"patched {path}"

    agent = _agent(tools=[write_file, read_file, patch_file, WebSearchTool()])
    prompt = os.environ["EZAT_PROMPT"]

    async def run() -> dict[str, Any]:
        if os.environ.get("EZAT_STREAM") == "1":
            result = Runner.run_streamed(agent, prompt)
            kinds = [event.type async for event in result.stream_events()]
            return {"final_output": result.final_output, "events": sorted(set(kinds))}
        done = await Runner.run(agent, prompt)
        return {"final_output": done.final_output, "events": []}

    out = asyncio.run(run())
    return {**out, "calls": calls}


def instructor_json_schema() -> dict[str, Any]:
    """instructor's JSON_SCHEMA mode on chat completions: pydantic's schema, sent as is."""
    import instructor
    from openai import OpenAI
    from pydantic import BaseModel

    class Address(BaseModel):
        street: str
        city: str

    class Person(BaseModel):
        name: str
        age: int
        address: Address

    client = instructor.from_openai(
        OpenAI(base_url=BASE_URL, api_key=API_KEY, max_retries=0),
        mode=instructor.Mode.JSON_SCHEMA,
    )
    person = client.chat.completions.create(
        model=MODEL,
        response_model=Person,
        max_retries=0,
        messages=[{"role": "user", "content": "Invent a person."}],
    )
    return {"person": person.model_dump()}


SCENARIOS = {
    "agents_tool": agents_tool,
    "agents_plain": agents_plain,
    "agents_stream": agents_stream,
    "agents_structured": agents_structured,
    "agents_errors": agents_errors,
    "agents_files": agents_files,
    "instructor_json_schema": instructor_json_schema,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
