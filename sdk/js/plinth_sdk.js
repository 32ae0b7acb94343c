// Write Plinth tools in JavaScript (the JavaScript helper replaces this file).
export class ToolError extends Error {}
