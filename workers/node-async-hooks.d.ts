/**
 * The one Node built-in the gateway imports: workerd provides AsyncLocalStorage under the
 * nodejs_compat flag (wrangler.toml), but the Workers type package does not declare Node's
 * modules, and @types/node would bring the whole of Node's globals into the Worker's types.
 */
declare module "node:async_hooks" {
  export class AsyncLocalStorage<T> {
    getStore(): T | undefined;
    run<R>(store: T, callback: () => R): R;
  }
}
