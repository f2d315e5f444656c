// The AI SDK's Open Responses provider (@ai-sdk/open-responses), a client of the Open
// Responses specification no one here wrote, driving toolchat's /v1/responses as its
// users would: a plain answer, a stream, a tool of the client's own that the SDK runs
// between steps, and a structured object. Run by
// tests/chat/openai_api/test_open_responses_client.py, which starts toolchat and the
// scripted model and checks what was stored; this prints one JSON line per case.
//
//   TOOLCHAT_URL=http://127.0.0.1:8000 TOOLCHAT_TOKEN=... MODEL=... node open_responses.mjs
import { createOpenResponses } from "@ai-sdk/open-responses";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const provider = createOpenResponses({
  name: "toolchat",
  url: `${process.env.TOOLCHAT_URL}/v1/responses`,
  apiKey: process.env.TOOLCHAT_TOKEN,
});
const model = provider(process.env.MODEL ?? "offline/offline");

/** @param {string} name @param {Record<string, unknown>} data */
function report(name, data) {
  console.log(JSON.stringify({ case: name, ...data }));
}

const plain = await generateText({ model, prompt: "What is 6*7?" });
report("plain", { text: plain.text, finish: plain.finishReason, usage: plain.usage });

const streamed = streamText({ model, prompt: "Say something in a few pieces." });
const pieces = [];
for await (const piece of streamed.textStream) pieces.push(piece);
report("stream", { pieces, text: await streamed.text, finish: await streamed.finishReason });

const ran = [];
const looked = await generateText({
  model,
  prompt: "Where is my order A-1?",
  tools: {
    lookup_order: tool({
      description: "Look an order up in the client's own system.",
      inputSchema: z.object({ order: z.string() }),
      execute: async ({ order }) => {
        ran.push(order);
        return { order, status: "shipped" };
      },
    }),
  },
  stopWhen: stepCountIs(3),
});
report("client_tool", {
  ran,
  steps: looked.steps.map((step) => step.toolCalls.map((call) => [call.toolName, call.input])),
  text: looked.text,
});

const structured = await generateText({
  model,
  prompt: "Name a city and its country.",
  output: Output.object({ schema: z.object({ city: z.string(), country: z.string() }) }),
});
report("object", { output: structured.output });
