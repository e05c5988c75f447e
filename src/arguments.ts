/** What `parseArgs` found wrong with a command's arguments, without its advice on positionals, shortened. */
export function argumentProblem (err: unknown): string {
  return (err as Error).message.replace(/\. To specify a positional[\s\S]*$/, '').slice(0, 200)
}
