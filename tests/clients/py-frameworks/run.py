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


SCENARIOS = {"agents_tool": agents_tool, "instructor_json_schema": instructor_json_schema}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
