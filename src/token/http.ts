import type { Dispatcher } from 'undici'
import type { GetJson, PostForm, TokenEndpointResponse } from './grant.js'

/** A token (or discovery) answer larger than this is not one. */
const MAX_BODY_BYTES = 256 * 1024

/** PostForm over undici; the caller owns `dispatcher` (proxy-aware, TLS verified). */
export function createPostForm (dispatcher: Dispatcher): PostForm {
  return (url, form, signal, headers) => send(dispatcher, 'POST', url, signal, {
    'content-type': 'application/x-www-form-urlencoded',
    accept: 'application/json',
    ...headers
  }, form)
}

/** GetJson over undici, for OpenID Connect discovery. */
export function createGetJson (dispatcher: Dispatcher): GetJson {
  return (url, signal) => send(dispatcher, 'GET', url, signal, { accept: 'application/json' })
}

async function send (
  dispatcher: Dispatcher, method: 'GET' | 'POST', url: string, signal: AbortSignal, headers: Record<string, string>, body?: string
): Promise<TokenEndpointResponse> {
  const { origin, pathname, search } = new URL(url)
  // undici's request() never follows redirects: a request goes to the
  // configured (or discovered) URL and nowhere else.
  const res = await dispatcher.request({ origin, path: pathname + search, method, signal, headers, ...(body !== undefined && { body }) })
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of res.body) {
    size += (chunk as Buffer).length
    if (size > MAX_BODY_BYTES) {
      res.body.destroy()
      throw new Error('the answer is larger than 256 KiB')
    }
    chunks.push(chunk as Buffer)
  }
  const { 'retry-after': retryAfter, 'content-type': contentType, location, 'dpop-nonce': dpopNonce } = res.headers
  return {
    status: res.statusCode,
    ...(typeof retryAfter === 'string' && { retryAfter }),
    ...(typeof contentType === 'string' && { contentType }),
    ...(typeof location === 'string' && { location }),
    ...(typeof dpopNonce === 'string' && { dpopNonce }),
    body: Buffer.concat(chunks).toString('utf8')
  }
}
