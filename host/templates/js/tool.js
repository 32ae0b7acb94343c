// `{{name_snake}}`: greets someone by name. Edit `call` (and the WIT in
// wit/world.wit, whose doc comments are the tool's signature).

import { ToolError, tool } from './plinth_sdk.js';

export const call = tool((input) => {
  const name = input.name.trim();
  if (!name) {
    throw new ToolError('the name is empty', {
      additionalPromptContent: 'Ask the person for their name, then call the tool again.',
    });
  }
  const hello = input.tone === 'warm' ? `Hello, ${name}! Lovely to meet you!` : `Hello, ${name}.`;
  return { greeting: Array(input.times ?? 1).fill(hello).join(' ') };
});
