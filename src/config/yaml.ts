// YAML's parser, in a module of its own: loaded (dynamically) only when CONFIG_FILE is set.
export { parse } from 'yaml'
