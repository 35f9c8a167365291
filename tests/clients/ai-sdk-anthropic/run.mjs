// One generateText call through the gateway with the AI SDK's Anthropic provider, as an app
// would make it: no maxOutputTokens, so the provider picks the model's maximum from its own
// table. Prints {text, usage, finishReason} as JSON; exits non-zero on any error.
import { createAnthropic } from "@ai-sdk/anthropic";
import { generateText } from "ai";

const anthropic = createAnthropic({
  baseURL: process.env.EZAT_BASE_URL,
  apiKey: process.env.EZAT_API_KEY,
});

try {
  const result = await generateText({
    model: anthropic(process.env.EZAT_MODEL),
    prompt: process.env.EZAT_PROMPT ?? "Say hello",
    maxRetries: 0,
  });
  console.log(JSON.stringify({ text: result.text, finishReason: result.finishReason, usage: result.usage }));
} catch (error) {
  console.error(String(error?.stack ?? error));
  if (error?.responseBody) console.error(error.responseBody);
  process.exit(1);
}
