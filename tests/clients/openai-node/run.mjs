// The openai Node SDK's Responses API against the gateway.
// Usage: node run.mjs <scenario>; env EZAT_BASE_URL (…/openai/v1), EZAT_API_KEY, EZAT_MODEL.
// Prints one JSON object with what the SDK returned; tests/e2e/test_responses_clients.py checks it.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.EZAT_BASE_URL,
  apiKey: process.env.EZAT_API_KEY,
  maxRetries: 0,
});
const model = process.env.EZAT_MODEL;
const weather = {
  type: "function",
  name: "get_weather",
  description: "Current weather for a city",
  parameters: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
    additionalProperties: false,
  },
  strict: true,
};

const scenarios = {
  async plain() {
    const response = await client.responses.create({ model, input: "Say hello" });
    return { id: response.id, status: response.status, text: response.output_text, usage: response.usage };
  },
  async stream() {
    const stream = client.responses.stream({ model, input: "Tell me a long answer" });
    let deltas = 0;
    const sequence = [];
    stream.on("event", (event) => sequence.push(event.sequence_number));
    stream.on("response.output_text.delta", () => (deltas += 1));
    const final = await stream.finalResponse();
    return { deltas, text: final.output_text, sequence, usage: final.usage };
  },
  async tools() {
    const common = {
      model,
      tools: [weather],
      reasoning: { effort: "high", summary: "auto" },
      include: ["reasoning.encrypted_content"],
      store: false,
    };
    const input = [{ role: "user", content: "Weather in Oslo?" }];
    const first = await client.responses.create({ ...common, input });
    const call = first.output.find((item) => item.type === "function_call");
    input.push(...first.output, { type: "function_call_output", call_id: call.call_id, output: "9°C" });
    const second = await client.responses.create({ ...common, input });
    return {
      first: first.output.map((item) => item.type),
      arguments: JSON.parse(call.arguments),
      text: second.output_text,
    };
  },
  async structured() {
    const response = await client.responses.create({
      model,
      input: "Largest city in Norway?",
      text: {
        format: {
          type: "json_schema",
          name: "city",
          strict: true,
          schema: {
            type: "object",
            properties: { city: { type: "string" }, population: { type: "integer" } },
            required: ["city", "population"],
            additionalProperties: false,
          },
        },
      },
    });
    return { parsed: JSON.parse(response.output_text) };
  },
  async errors() {
    const out = {};
    const wrong = new OpenAI({ baseURL: process.env.EZAT_BASE_URL, apiKey: "ezat_sk_wrong", maxRetries: 0 });
    for (const [name, call] of [
      ["wrongKey", () => wrong.responses.create({ model, input: "x" })],
      ["unknownModel", () => client.responses.create({ model: "gpt-9", input: "x" })],
    ]) {
      try {
        await call();
        out[name] = { status: 200 };
      } catch (error) {
        out[name] = { status: error.status, code: error.code, type: error.constructor.name };
      }
    }
    return out;
  },
};

const scenario = scenarios[process.argv[2]];
if (!scenario) throw new Error(`unknown scenario ${process.argv[2]}`);
console.log(JSON.stringify(await scenario()));
