// Drives reviewbot's MCP tools with the official TypeScript SDK client, the client MCP
// Inspector is built on: every result is checked against the tool's outputSchema exactly as
// the SDK checks it for Inspector.
//
//   node driver.mjs http URL TOKEN          streamable HTTP with Authorization: Bearer TOKEN
//   node driver.mjs stdio COMMAND ARG...    a stdio server started with this environment
//
// Commands arrive one JSON object a line on stdin, each answered by one JSON line on stdout:
//   {"op": "list"}                              -> {"tools": [names]}
//   {"op": "call", "tool": T, "arguments": {}, "progress": true?}
//                                               -> {"isError", "text": [...], "structured"}
//                                                  or {"exception": message} when the SDK
//                                                  itself rejects the result
// Every notification the server sends is printed as {"notification": {method, params}}.
import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

function emit(value) {
  process.stdout.write(JSON.stringify(value) + "\n");
}

const [mode, ...rest] = process.argv.slice(2);
let transport;
if (mode === "http") {
  const [url, token] = rest;
  transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else if (mode === "stdio") {
  const [command, ...args] = rest;
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
} else {
  emit({ fatal: `unknown mode ${mode}` });
  process.exit(2);
}

const client = new Client({ name: "reviewbot-ts-test", version: "1.0.0" });
client.fallbackNotificationHandler = async (notification) => {
  emit({ notification: { method: notification.method, params: notification.params ?? {} } });
};
// Logging notifications have a schema of their own in the SDK: handled, then printed alike.
const { LoggingMessageNotificationSchema } = await import("@modelcontextprotocol/sdk/types.js");
client.setNotificationHandler(LoggingMessageNotificationSchema, async (notification) => {
  emit({ notification: { method: notification.method, params: notification.params } });
});

try {
  await client.connect(transport);
} catch (error) {
  emit({ fatal: String(error?.message ?? error) });
  process.exit(1);
}
// Inspector lists the tools first; the SDK keeps each tool's outputSchema from that list and
// checks every later result of the tool against it.
await client.listTools();
emit({ ready: true });

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  try {
    if (command.op === "list") {
      const listed = await client.listTools();
      emit({ tools: listed.tools.map((tool) => tool.name) });
    } else if (command.op === "call") {
      const result = await client.callTool(
        { name: command.tool, arguments: command.arguments ?? {} },
        undefined,
        {
          timeout: (command.timeout_s ?? 30) * 1000,
          // Asking for progress sends a progressToken: the server's notifications on this
          // call's stream arrive here, before the result.
          ...(command.progress
            ? {
                onprogress: (progress) =>
                  emit({ notification: { method: "notifications/progress", params: progress } }),
              }
            : {}),
        },
      );
      emit({
        isError: result.isError === true,
        text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text),
        structured: result.structuredContent ?? null,
      });
    } else {
      emit({ exception: `unknown op ${command.op}` });
    }
  } catch (error) {
    emit({ exception: String(error?.message ?? error) });
  }
}
await client.close();
