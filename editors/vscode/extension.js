// Starts `attndsl lsp` (stdio) for .attn files: diagnostics as you type, formatting,
// hover, completion and go-to-definition. The command is the `attndsl.server.command` setting.
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace
    .getConfiguration("attndsl")
    .get("server.command", ["attndsl", "lsp"]);
  const server = { command, args, transport: TransportKind.stdio };
  client = new LanguageClient(
    "attndsl",
    "attndsl",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "attn" }, { scheme: "untitled", language: "attn" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
