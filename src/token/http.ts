import type { Dispatcher } from 'undici'
import type { PostForm } from './grant.js'

/** A token answer larger than this is not a token answer. */
const MAX_BODY_BYTES = 256 * 1024

/** PostForm over undici; the caller owns `dispatcher` (proxy-aware, TLS verified). */
export function createPostForm (dispatcher: Dispatcher): PostForm {
  return async function postForm (url, form, signal) {
    const { origin, pathname, search } = new URL(url)
    // undici's request() never follows redirects: a token request goes to
    // the configured URL and nowhere else.
    const res = await dispatcher.request({
      origin,
      path: pathname + search,
      method: 'POST',
      signal,
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: form
    })
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length
      if (size > MAX_BODY_BYTES) {
        res.body.destroy()
        throw new Error('token endpoint answer is larger than 256 KiB')
      }
      chunks.push(chunk as Buffer)
    }
    const { 'retry-after': retryAfter, 'content-type': contentType, location } = res.headers
    return {
      status: res.statusCode,
      ...(typeof retryAfter === 'string' && { retryAfter }),
      ...(typeof contentType === 'string' && { contentType }),
      ...(typeof location === 'string' && { location }),
      body: Buffer.concat(chunks).toString('utf8')
    }
  }
}
