// A tiny upstream MCP server over stdio for the code-mode tests: codecage
// (`--upstream demo=...`) starts it and offers its tools to Python code as
// tools.add(...), tools.echo(...), tools.fail(...).
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const server = new Server({ name: "demo-upstream", version: "1.0.0" }, { capabilities: { tools: {} } });

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "add",
      description: "Adds two numbers.",
      inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
      outputSchema: { type: "object", properties: { sum: { type: "number" } }, required: ["sum"] },
    },
    {
      name: "echo",
      description: "Returns its text.",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    },
    { name: "fail", description: "Always fails.", inputSchema: { type: "object", properties: {} } },
  ],
}));

server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const args = req.params.arguments ?? {};
  switch (req.params.name) {
    case "add":
      return { content: [{ type: "text", text: String(args.a + args.b) }], structuredContent: { sum: args.a + args.b } };
    case "echo":
      return { content: [{ type: "text", text: args.text }] };
    case "fail":
      return { isError: true, content: [{ type: "text", text: "fail always fails" }] };
    default:
      throw new Error(`no tool ${req.params.name}`);
  }
});

await server.connect(new StdioServerTransport());
