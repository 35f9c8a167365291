// The Vercel AI SDK's default `openai(model)` provider (the Responses API) against the gateway.
// Usage: node run.mjs <scenario>; env EZAT_BASE_URL (…/openai/v1), EZAT_API_KEY, EZAT_MODEL.
// Prints one JSON object with what the SDK returned; tests/e2e/test_responses_clients.py checks it.
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const provider = createOpenAI({
  baseURL: process.env.EZAT_BASE_URL,
  apiKey: process.env.EZAT_API_KEY,
});
const model = provider(process.env.EZAT_MODEL);
const noRetry = { maxRetries: 0 };

const weather = tool({
  description: "Current weather for a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `9°C in ${city}`,
});

const scenarios = {
  async plain() {
    const result = await generateText({ model, prompt: "Say hello", ...noRetry });
    return { text: result.text, finishReason: result.finishReason, usage: result.usage };
  },
  async stream() {
    const result = streamText({ model, prompt: "Tell me a long answer", ...noRetry });
    const parts = [];
    for await (const delta of result.textStream) parts.push(delta);
    return { deltas: parts.length, text: parts.join(""), usage: await result.usage };
  },
  async tools() {
    // Thinking in a tool loop, stateless: store false makes the SDK ask for encrypted_content.
    const store = process.env.EZAT_STORE !== "false";
    const result = await generateText({
      model,
      prompt: "Weather in Oslo?",
      tools: { get_weather: weather },
      stopWhen: stepCountIs(4),
      providerOptions: { openai: { forceReasoning: true, reasoningEffort: "high", store } },
      ...noRetry,
    });
    return {
      text: result.text,
      steps: result.steps.map((s) => ({
        finishReason: s.finishReason,
        toolCalls: s.toolCalls.map((c) => ({ name: c.toolName, input: c.input })),
        reasoning: s.reasoning.length,
      })),
    };
  },
  async object() {
    const result = await generateObject({
      model,
      schema: z.object({ city: z.string(), population: z.number() }),
      prompt: "Largest city in Norway?",
      ...noRetry,
    });
    return { object: result.object };
  },
  async errors() {
    const out = {};
    for (const [name, m] of [
      ["wrongKey", createOpenAI({ baseURL: process.env.EZAT_BASE_URL, apiKey: "ezat_sk_wrong" })(process.env.EZAT_MODEL)],
      ["unknownModel", provider("gpt-9")],
    ]) {
      try {
        await generateText({ model: m, prompt: "x", ...noRetry });
        out[name] = { status: 200 };
      } catch (error) {
        out[name] = { status: error.statusCode, message: error.message };
      }
    }
    return out;
  },
};

const scenario = scenarios[process.argv[2]];
if (!scenario) throw new Error(`unknown scenario ${process.argv[2]}`);
console.log(JSON.stringify(await scenario()));
