import { type FormEvent, useState } from 'react';
import { type ApiError, data, page, toApiError, useLoad, useSession } from '../../api.js';
import { Button, Empty, ErrorBox, Field, Loading, Time } from '../../ui.js';

const money = (cents: number) => (cents / 100).toLocaleString(undefined, { style: 'currency', currency: 'USD' });

/** Dollars as typed ("25", "25.50") to whole cents; null when it is not an amount. */
function toCents(input: string): number | null {
  const t = input.trim().replace(/^\$/, '');
  if (!/^\d+(\.\d{1,2})?$/.test(t)) return null;
  return Math.round(Number(t) * 100);
}

/** Settings › Billing (organization admins): credits, their history, top-up, promo codes and auto top-up. */
export function BillingSettings() {
  const session = useSession();
  if (!session.can('billing:read')) {
    return (
      <div className="billing">
        <h2>Billing</h2>
        <Empty>Billing is managed by your organization's admins: this credential has no billing:read scope.</Empty>
      </div>
    );
  }
  return <AdminBilling />;
}

function AdminBilling() {
  const session = useSession();
  const { hangar } = session;
  const canWrite = session.can('billing:write');
  const plan = useLoad(() => data(hangar.api.GET('/v1/billing/plan')), []);
  const [historyTick, setHistoryTick] = useState(0);
  const refresh = () => {
    plan.reload();
    setHistoryTick((t) => t + 1);
  };
  // The return from a paid checkout: the provider sends the browser back with ?session_id=… (or ?cancelled=…).
  const returned = new URLSearchParams(window.location.search);
  return (
    <div className="billing">
      <h2>Billing</h2>
      {returned.get('session_id') ? (
        <CheckoutReturn sessionId={returned.get('session_id')!} cancelled={returned.has('cancelled')} onDone={refresh} />
      ) : null}
      <ErrorBox error={plan.error} title="Could not load the plan" />
      {plan.loading && !plan.data ? <Loading what="credits" /> : null}
      {plan.data ? (
        <>
          {plan.data.billingEnabled ? null : (
            <p className="notice">Billing is off on this installation (HANGAR_BILLING=off): usage is reported, never charged.</p>
          )}
          <div className="cards" aria-live="polite">
            <div className="card">
              <div className="muted">Balance</div>
              <div className="value" data-testid="balance">
                {money(plan.data.credits.balanceCents)}
              </div>
            </div>
            <div className="card">
              <div className="muted">Available (less running work)</div>
              <div className="value">{money(plan.data.credits.availableCents)}</div>
            </div>
            <div className="card">
              <div className="muted">Spent this period</div>
              <div className="value">{money(plan.data.credits.spentThisPeriodCents)}</div>
            </div>
            <div className="card">
              <div className="muted">Plan</div>
              <div className="value">{plan.data.plan.name}</div>
              <div className="muted small">{money(plan.data.plan.includedMonthlyCents)} included each month</div>
            </div>
          </div>
          <p className="muted small">
            Period <Time iso={plan.data.period.start} /> – <Time iso={plan.data.period.end} /> (UTC calendar month).
            {plan.data.credits.exhaustedAt ? (
              <>
                {' '}
                Credits ran out at <Time iso={plan.data.credits.exhaustedAt} />: new work is refused until you add credits.
              </>
            ) : null}
          </p>
        </>
      ) : null}
      {canWrite ? (
        <div className="billing-forms">
          <Topup />
          <Promo onRedeemed={refresh} />
        </div>
      ) : (
        <p className="muted">Top-ups, promo codes and auto top-up need the billing:write scope.</p>
      )}
      {canWrite ? <AutoTopup /> : null}
      <History tick={historyTick} />
    </div>
  );
}

function CheckoutReturn({ sessionId, cancelled, onDone }: { sessionId: string; cancelled: boolean; onDone: () => void }) {
  const { hangar } = useSession();
  const done = useLoad(async () => {
    if (cancelled) return null;
    const r = await data(hangar.api.GET('/v1/billing/success', { params: { query: { session_id: sessionId } } }));
    onDone();
    return r;
  }, [sessionId, cancelled]);
  if (cancelled) return <p className="notice">The checkout was cancelled: nothing was charged.</p>;
  if (done.loading) return <Loading what="the payment" />;
  if (done.error) return <ErrorBox error={done.error} title="The payment was not credited" />;
  return done.data ? (
    <p className="notice ok" role="status">
      Paid: {money(done.data.amountCents)} {done.data.creditedNow ? 'added to' : 'was already in'} your balance (now {money(done.data.balanceCents)}).
    </p>
  ) : null;
}

function Topup() {
  const { hangar } = useSession();
  const [amount, setAmount] = useState('25');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | Error | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const amountCents = toCents(amount);
    if (!amountCents) return setError(new Error('enter an amount in dollars, such as 25 or 25.50'));
    setBusy(true);
    setError(null);
    try {
      const checkout = await data(hangar.api.POST('/v1/billing/topup', { body: { amountCents } }));
      if (!checkout.checkoutUrl) throw new Error(`the checkout is ${checkout.status}`);
      // The payment provider's page: it sends the browser back to /v1/billing/success when paid.
      window.location.assign(checkout.checkoutUrl);
    } catch (err) {
      setError(err instanceof Error && !('code' in err) ? err : toApiError(err));
      setBusy(false);
    }
  };
  return (
    <form className="panel" onSubmit={submit}>
      <h3>Buy credits</h3>
      <Field label="Amount (USD)" hint="You pay at the payment provider; the card is saved for auto top-up.">
        {(id) => <input id={id} inputMode="decimal" value={amount} onChange={(e) => setAmount(e.target.value)} required />}
      </Field>
      <Button kind="primary" type="submit" disabled={busy} aria-busy={busy}>
        {busy ? 'Opening checkout…' : 'Top up'}
      </Button>
      <ErrorBox error={error} title="Top-up not started" />
    </form>
  );
}

function Promo({ onRedeemed }: { onRedeemed: () => void }) {
  const { hangar } = useSession();
  const [code, setCode] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);
  const [done, setDone] = useState<{ code: string; creditsCents: number; balanceCents: number } | null>(null);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      setDone(await data(hangar.api.POST('/v1/billing/promo-codes/redeem', { body: { code: code.trim() } })));
      setCode('');
      onRedeemed();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="panel" onSubmit={submit}>
      <h3>Redeem a promo code</h3>
      <Field label="Promo code">
        {(id) => <input id={id} value={code} onChange={(e) => setCode(e.target.value)} autoComplete="off" spellCheck={false} required />}
      </Field>
      <Button kind="primary" type="submit" disabled={busy} aria-busy={busy}>
        Redeem
      </Button>
      <div aria-live="polite">
        {done ? (
          <p className="notice ok" role="status">
            Code {done.code} added {money(done.creditsCents)}. Balance now {money(done.balanceCents)}.
          </p>
        ) : null}
      </div>
      <ErrorBox error={error} title="Not redeemed" />
    </form>
  );
}

function AutoTopup() {
  const { hangar } = useSession();
  const settings = useLoad(() => data(hangar.api.GET('/v1/billing/auto-topup')), []);
  if (settings.error) return <ErrorBox error={settings.error} title="Could not load auto top-up" />;
  if (!settings.data) return <Loading what="auto top-up" />;
  return <AutoTopupForm key={JSON.stringify(settings.data)} settings={settings.data} onSaved={settings.reload} />;
}

function AutoTopupForm({
  settings,
  onSaved,
}: {
  settings: { enabled: boolean; thresholdCents: number; topupAmountCents: number; paymentMethodSaved: boolean; consecutiveFailures: number };
  onSaved: () => void;
}) {
  const { hangar } = useSession();
  const [enabled, setEnabled] = useState(settings.enabled);
  const [threshold, setThreshold] = useState(String(settings.thresholdCents / 100));
  const [amount, setAmount] = useState(String(settings.topupAmountCents / 100));
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | Error | null>(null);
  const [saved, setSaved] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    const thresholdCents = toCents(threshold);
    const topupAmountCents = toCents(amount);
    if (thresholdCents === null || topupAmountCents === null) return setError(new Error('enter amounts in dollars, such as 10 or 10.50'));
    setBusy(true);
    setError(null);
    setSaved(false);
    try {
      await data(hangar.api.PUT('/v1/billing/auto-topup', { body: { enabled, thresholdCents, topupAmountCents } }));
      setSaved(true);
      onSaved();
    } catch (err) {
      setError(toApiError(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="panel" onSubmit={submit}>
      <h3>Auto top-up</h3>
      <p className="muted small">
        {settings.paymentMethodSaved
          ? 'A card is saved from an earlier top-up.'
          : 'No card is saved yet: a paid top-up saves one, and auto top-up needs it.'}
        {settings.consecutiveFailures ? ` ${settings.consecutiveFailures} declined in a row (three turn auto top-up off).` : ''}
      </p>
      <label className="check">
        <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.target.checked)} /> Top up automatically
      </label>
      <Field label="When the balance falls to (USD)">
        {(id) => <input id={id} inputMode="decimal" value={threshold} onChange={(e) => setThreshold(e.target.value)} required />}
      </Field>
      <Field label="Add (USD)">
        {(id) => <input id={id} inputMode="decimal" value={amount} onChange={(e) => setAmount(e.target.value)} required />}
      </Field>
      <Button kind="primary" type="submit" disabled={busy} aria-busy={busy}>
        Save auto top-up
      </Button>
      <span aria-live="polite">{saved ? <span className="muted"> Saved.</span> : null}</span>
      <ErrorBox error={error} title="Auto top-up not saved" />
    </form>
  );
}

type Entry = { id: string; kind: string; amountCents: number; description: string; createdAt: string };

function History({ tick }: { tick: number }) {
  const { hangar } = useSession();
  const [cursor, setCursor] = useState<string | undefined>(undefined);
  const [trail, setTrail] = useState<(string | undefined)[]>([]);
  const entries = useLoad(
    () => page(hangar.api.GET('/v1/billing/credits/history', { params: { query: { limit: 20, ...(cursor ? { cursor } : {}) } } })),
    [cursor, tick],
  );
  const rows = (entries.data?.data ?? []) as Entry[];
  const next = entries.data?.meta?.nextCursor ?? null;
  return (
    <section>
      <h3>Credit history</h3>
      <ErrorBox error={entries.error} title="Could not load the history" />
      {entries.loading && !entries.data ? <Loading what="history" /> : null}
      {entries.data && rows.length === 0 ? <Empty>No credit entries yet.</Empty> : null}
      {rows.length > 0 ? (
        <div className="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">When</th>
                <th scope="col">Kind</th>
                <th scope="col">Description</th>
                <th scope="col" className="num">
                  Amount
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((e) => (
                <tr key={e.id}>
                  <td>
                    <Time iso={e.createdAt} />
                  </td>
                  <td>{e.kind.replace(/_/g, ' ')}</td>
                  <td>{e.description}</td>
                  <td className={`num ${e.amountCents < 0 ? 'neg' : 'pos'}`}>{money(e.amountCents)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : null}
      <div className="actions">
        {trail.length > 0 ? (
          <Button
            onClick={() => {
              setCursor(trail[trail.length - 1]);
              setTrail(trail.slice(0, -1));
            }}
          >
            Newer
          </Button>
        ) : null}
        {next ? (
          <Button
            onClick={() => {
              setTrail([...trail, cursor]);
              setCursor(next);
            }}
          >
            Older
          </Button>
        ) : null}
      </div>
    </section>
  );
}
