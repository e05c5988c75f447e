import { Histogram, Registry, type Metric } from 'prom-client'
import t from 'tap'
import { OneLabelHistogram } from '../../src/admin/histogram.js'

t.test('renders exactly what prom-client\'s own Histogram renders for the same observations', async (t) => {
  const buckets = [0.001, 0.01, 0.1, 1]
  const observations: Array<[number, number]> = [[200, 0.0005], [200, 0.001], [200, 0.05], [404, 3], [200, 0.2], [503, 0.01]]

  const theirs = new Registry()
  const reference = new Histogram({ name: 'x_seconds', help: 'h', labelNames: ['status'], buckets, registers: [theirs] })
  for (const [status, v] of observations) reference.labels({ status: String(status) }).observe(v)

  const ours = new Registry()
  const histogram = new OneLabelHistogram('x_seconds', 'h', 'status', buckets)
  ours.registerMetric(histogram as unknown as Metric)
  for (const [status, v] of observations) histogram.observe(status, v)

  t.equal(await ours.metrics(), await theirs.metrics())
  histogram.reset()
  t.equal(await ours.metrics(), '# HELP x_seconds h\n# TYPE x_seconds histogram\n')
})
