"""The EM core of the mixture regression: E-step, M-step, the (sigma^2, b) step and the SQUAREM iteration.

Seed 004 part 1, slide "Parameters Learning" (the derivation, the constraint
:math:`b\ge\sigma^2`, the measurement floor and the acceleration are in the
module docstring of :mod:`dpcore.detect.robust_em`). Split out of it in
issue 29: the robust start is :mod:`.robust_start`, the passes over chunks of
rows are :mod:`.em_passes`. Every function here works on the rows it is given
(a dense standardised design ``Z`` or its factored form,
:class:`~dpcore.detect.level_design.FactoredDesign`) and returns sums that
add over chunks. Nothing here logs or warns; callers run it under
``numpy.errstate(all="ignore")``.
"""
from __future__ import annotations

import math

import numpy as np
from dpcore.runtime.blas_threads import one_blas_thread
from dpcore.runtime.lazy_modules import lazy_module

_special = lazy_module("scipy.special")  # imported on first use (dpr spec check / plan never load scipy)

_LOG_PI = math.log(math.pi)
_LOG_2PI = math.log(2.0 * math.pi)
#: Floor of sigma^2 in standardised units (y has unit robust spread).
_SIGMA2_FLOOR = 1e-12
#: p is kept in [_P_FLOOR, 1 - _P_FLOOR] so both log-weights stay finite.
_P_FLOOR = 1e-9
#: Relative ridge on the normal equations (collinear contexts).
_RIDGE = 1e-9
#: Smallest share of its diagonal entry a Cholesky pivot may keep before the
#: M-step falls back to the ridge (see :func:`_solve_exact_or_ridge`).
_RANK_TOL = 1e-10
#: Share of the Cauchy weights t_i * tau_bar_i kept in the coefficient step of start="lts"/"auto"
#: (robust_start module docstring, "Masking"): small enough that no leverage cluster pulls the fit, positive so
#: that a one-hot level whose rows the Cauchy holds keeps its own weighted mean.
_OUTLIER_WEIGHT = 1e-3


def _solve_exact_or_ridge(G: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve one system ``G beta = rhs`` without a ridge when it is well posed, else :func:`_solve`.

    Well posed: the Cholesky factor exists and every pivot keeps more than
    ``_RANK_TOL`` of its column's diagonal entry (``L_jj^2 > 1e-10 G_jj``, i.e.
    no column is explained by the earlier ones up to ``1 - 1e-10`` of its
    weighted variance). The EM M-step uses this: under the measurement floor the
    Gaussian rows weigh ~1e7 times more than the rows the Cauchy component
    holds, and even a relative ridge of 1e-9 on the level columns then moved the
    intercept -- i.e. the mean of the dropped reference level, whose rows were
    all held by the Cauchy -- far from that level's rows, which kept the whole
    level flagged (NYC flights ``distance ~ route``: the 55 rows of the
    reference route, residual 765 miles). Without a ridge the weighted least
    squares puts every level's fitted value at its own weighted mean, however
    small its weights. Collinear designs still get the ridge.
    """
    diag = np.diagonal(G)
    if np.all(diag > 0):
        try:
            L = np.linalg.cholesky(G)
        except np.linalg.LinAlgError:
            L = None
        if L is not None and np.all(np.square(np.diagonal(L)) > _RANK_TOL * diag):
            with one_blas_thread():
                return np.linalg.solve(G, rhs)
    return _solve(G, rhs)


def _solve(G: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Solve (stacks of) normal equations ``G beta = rhs`` with a tiny per-column relative ridge.

    ``G`` has shape (..., q, q), ``rhs`` (..., q). The ridge adds ``1e-9 * G_jj``
    to each diagonal entry (``1e-9`` times the mean diagonal, or ``1e-9``, where
    ``G_jj = 0``). Relative to each column's *own* weight, it makes every stack
    positive definite without changing well-posed solutions beyond round-off.
    (A ridge relative to the *mean* diagonal shrank the coefficient of a rare
    one-hot level whose rows all carry small EM weights towards 0 -- a whole
    category of records was then left unfitted and flagged.)

    Column 0 is the intercept (the constant column of every design here) and
    gets no ridge: its diagonal entry is the weight of *all* rows, so a ridge
    relative to it outweighed the rows of the dropped reference level once the
    EM had down-weighted them, pulled the intercept off that level's mean and
    flagged the whole level (NYC flights ``distance ~ route``: the 55 rows of
    the reference route, residual 765 miles). The intercept column is 1 on every
    row, so ``G`` stays positive definite without it.

    The q x q solves are small; they run with one BLAS thread
    (:func:`dpcore.runtime.blas_threads.one_blas_thread`), as multi-threaded OpenBLAS
    is up to ~40x slower on them on a busy machine.
    """
    q = G.shape[-1]
    diag = np.diagonal(G, axis1=-2, axis2=-1)
    mean = diag.mean(axis=-1, keepdims=True)
    fill = np.where(mean > 0, mean, 1.0)
    lam = _RIDGE * np.where(diag > 0, diag, fill)
    lam[..., 0] = 0.0  # the intercept is never shrunk (see above)
    G = G + lam[..., None] * np.eye(q)
    with one_blas_thread():
        try:
            return np.linalg.solve(G, rhs[..., None])[..., 0]
        except np.linalg.LinAlgError:  # pragma: no cover - ridge makes this practically unreachable
            return (np.linalg.pinv(G) @ rhs[..., None])[..., 0]


def _log_odds(r: np.ndarray, s2: float, p: float, b: float) -> np.ndarray:
    """Posterior log-odds ``log(t_i / (1 - t_i))`` that record i's error is Cauchy (never saturates)."""
    r2 = r * r
    lg = (math.log1p(-p) - 0.5 * (_LOG_2PI + math.log(s2))) - r2 * (0.5 / s2)
    lc = (math.log(p) - _LOG_PI - 0.5 * math.log(2.0 * b)) - np.log1p(r2 * (0.5 / b))
    return lc - lg


def _posterior(d: np.ndarray, e: np.ndarray | None = None) -> np.ndarray:
    """``t = expit(d)`` from ``e = exp(-|d|)``: ``1 / (1 + e)`` where ``d >= 0``, ``e / (1 + e)`` elsewhere.

    Never overflows (``e <= 1``) and is within an ulp or two of
    ``scipy.special.expit``; one vectorised ``exp`` per row (numpy's SIMD
    loop) instead of expit's scalar one, which was a fifth of an E-step pass
    (issue 29). Every posterior of the EM (:func:`_estep`, the ``ru`` pass)
    comes from here, so they agree bit for bit. ``e`` may be passed when the
    caller has it; it is overwritten.
    """
    if e is None:
        e = np.exp(-np.abs(d))
    one = e + 1.0
    np.divide(e, one, out=e)  # e / (1 + e): where d < 0
    np.divide(1.0, one, out=one)  # 1 / (1 + e): where d >= 0
    np.copyto(e, one, where=d >= 0)
    return e


def _estep(r: np.ndarray, s2: float, p: float, b: float):
    """Posterior outlier probabilities, E[tau | outlier] and the log-likelihood.

    With the log-densities ``lg`` (Gaussian) and ``lc`` (Cauchy) of each row's
    residual and their difference ``d = lc - lg`` (the posterior log-odds,
    :func:`_log_odds`): ``t = expit(d)`` (:func:`_posterior`) and each row's
    log-likelihood ``logaddexp(lg, lc) = max(lg, lc) + log1p(exp(-|d|))``,
    both from one ``exp(-|d|)`` (issue 29: numpy's ``logaddexp`` and scipy's
    ``expit`` each evaluate their own ``exp`` in a scalar loop; the fits agree
    with theirs to round-off, BENCHMARKS "detect_passes").
    """
    r2 = r * r
    etau = np.multiply(r2, 0.5)
    etau += b
    np.divide(1.0, etau, out=etau)  # 1 / (b + r^2 / 2)
    lc = np.multiply(r2, 0.5 / b)
    np.log1p(lc, out=lc)
    np.subtract(math.log(p) - _LOG_PI - 0.5 * math.log(2.0 * b), lc, out=lc)
    lg = np.multiply(r2, 0.5 / s2, out=r2)
    np.subtract(math.log1p(-p) - 0.5 * (_LOG_2PI + math.log(s2)), lg, out=lg)
    d = lc - lg
    np.maximum(lg, lc, out=lg)  # max(lg, lc)
    e = np.abs(d)
    np.negative(e, out=e)
    np.exp(e, out=e)  # exp(-|d|) <= 1
    lc = np.log1p(e, out=lc)
    lc += lg
    ll = float(lc.sum())
    return _posterior(d, e), etau, ll


def _mstats(Z, y, t, etau, s2, outlier_weight: float = 1.0):
    """The M-step's sufficient statistics of some rows: they add over chunks of rows.

    Returns ``st = sum t``, ``su = sum (1-t)``, ``te = sum t tau_bar``, the
    weighted normal equations ``G = Z^T W Z`` and ``rhs = Z^T W y`` with
    ``w = (1-t)/sigma^2 + outlier_weight * t tau_bar`` (module docstring,
    "EM"). Everything the M-step needs except ``ru = sum (1-t) e_new^2``, which
    needs the new coefficients (:func:`_ru`).
    """
    st = float(t.sum())
    u = 1.0 - t
    w = u * (1.0 / s2) + outlier_weight * (t * etau)  # 1.0 * x == x exactly: the exact step is unchanged
    if isinstance(Z, np.ndarray):
        Zw = Z * w[:, None]
        G, rhs = Zw.T @ Z, Zw.T @ y
    else:  # a FactoredDesign: the level blocks from per-level sums (dpcore.detect.level_design)
        G, rhs = Z.weighted_normal_equations(w, y)
    return st, float(u.sum()), float(t @ etau), G, rhs


def _ru(Z, y, t, beta_new) -> float:
    """``sum (1-t_i) e_i^2`` with the residuals of the new coefficients (the sigma^2 update's numerator)."""
    r = y - Z @ beta_new
    return float((1.0 - t) @ (r * r))


def _mstep(Z, y, t, etau, s2, b, floor: float = _SIGMA2_FLOOR, outlier_weight: float = 1.0):
    """One ECM sweep: p, then (w, b0), then (sigma^2, b) jointly (see the module docstring).

    ``outlier_weight`` scales the Cauchy part ``t_i tau_bar_i`` of the
    coefficient step's weights: 1 is the exact ECM step (``start="legacy"``,
    ``"ols"``); ``_OUTLIER_WEIGHT`` (``start="lts"``) is the inlier-driven step
    of the module docstring, section "Masking". Built from the same
    per-chunk statistics as the streamed EM (:func:`_mstats`, :func:`_ru`).
    """
    n = y.shape[0]
    st, su, te, G, rhs = _mstats(Z, y, t, etau, s2, outlier_weight)
    p = min(max(st / n, _P_FLOOR), 1.0 - _P_FLOOR)
    beta = _solve_exact_or_ridge(G, rhs)
    s2, b = _noise_step(su, _ru(Z, y, t, beta), st, te, s2, b, floor)
    return beta, s2, p, b, y - Z @ beta


def _noise_step(
    su: float, ru: float, st: float, te: float, s2_old: float, b_old: float, floor: float = _SIGMA2_FLOOR
) -> tuple[float, float]:
    """Joint conditional maximum of Q over (sigma^2, b) subject to b >= sigma^2.

    ``su = sum(1-t)``, ``ru = sum((1-t) e^2)``, ``st = sum(t)``, ``te = sum(t tau_bar)``.
    Q(sigma^2, b) = -su/2 log sigma^2 - ru/(2 sigma^2) + st/2 log b - te b is concave
    in (log 1/sigma^2, log b) and the constraint is the half-plane
    log b - log sigma^2 >= 0, so: take the unconstrained maximum
    (ru/su, st/(2 te)) if feasible, else the unique maximum on the boundary
    b = sigma^2 = v, the positive root of -2 te v^2 + (st - su) v + ru = 0.
    Vanishing denominators (no inliers / no outliers) keep the old value.
    ``floor`` (standardised units, >= the numeric floor): sigma^2 >= floor; raising
    sigma^2 to it and b to max(b, sigma^2) is the exact maximum on the constrained
    set (Q is separable and unimodal in each part, module docstring).
    """
    tiny = 1e-12
    s2 = ru / su if su > tiny else s2_old
    b = 0.5 * st / te if (st > tiny and te > 1e-300) else b_old
    if b < s2 and su > tiny and st > tiny and te > 1e-300 and ru > 0:
        c = st - su
        s2 = b = (c + math.sqrt(c * c + 8.0 * te * ru)) / (4.0 * te)
    s2 = max(s2, floor)
    return s2, max(b, s2)


def _em_loop(estep, ru, n: int, beta, s2, p, b, max_iter: int, tol: float, accelerate: bool = True,
             floor: float = _SIGMA2_FLOOR):
    """The EM iteration (robust_em module docstring, "EM" and "Acceleration"), over passes the caller supplies.

    ``estep(beta, s2, p, b)`` returns the state ``(beta, s2, p, b, ll, (st, su, te, G, rhs))``: the E-step's
    log-likelihood and the M-step's sums (:func:`_mstats`) over all ``n`` rows; ``ru(theta_old, beta_new)``
    returns :func:`_ru` over all rows. Each M-step: ``p``, the coefficients from ``G beta = rhs``, then
    ``(sigma^2, b)`` (:func:`_noise_step`). SQUAREM (Varadhan and Roland 2008, S3, step length clipped to
    [-100, -1]) on ``(beta, log sigma^2, logit p, log b)``: two EM steps, an extrapolated point, one
    stabilising EM step, kept only if its log-likelihood is at least that of the two plain steps.
    Stops when ``|l_new - l_old| / max(|l_old|, n) < tol`` or after ``max_iter`` M-steps.
    :func:`dpcore.detect.em_passes._em_chunks` supplies the passes over a chunk source.
    """
    def step(state):
        beta_o, s2_o, p_o, b_o, _ll, (st, su, te, G, rhs) = state
        p_n = min(max(st / n, _P_FLOOR), 1.0 - _P_FLOOR)
        beta_n = _solve_exact_or_ridge(G, rhs)
        s2_n, b_n = _noise_step(su, ru((beta_o, s2_o, p_o, b_o), beta_n), st, te, s2_o, b_o, floor)
        return estep(beta_n, s2_n, p_n, b_n)

    def vec(st):
        return np.r_[st[0], math.log(st[1]), math.log(st[2]) - math.log1p(-st[2]), math.log(st[3])]

    state = estep(beta, s2, p, b)
    rel = math.inf
    converged = False
    it = 0
    while it < max_iter:
        ll_old = state[4]
        if accelerate and max_iter - it >= 3:
            s1 = step(state)
            s2_ = step(s1)
            it += 2
            new = s2_
            th0, th1, th2 = vec(state), vec(s1), vec(s2_)
            rr, v = th1 - th0, th2 - 2.0 * th1 + th0
            nv = float(np.linalg.norm(v))
            if nv > 0 and np.all(np.isfinite(v)):
                alpha = max(min(-float(np.linalg.norm(rr)) / nv, -1.0), -100.0)
                if alpha < -1.0:
                    th = th0 - 2.0 * alpha * rr + alpha * alpha * v
                    q = beta.shape[0]
                    e_beta = th[:q]
                    e_s2 = max(math.exp(min(th[q], 700.0)), floor)
                    e_p = min(max(float(_special.expit(th[q + 1])), _P_FLOOR), 1.0 - _P_FLOOR)
                    e_b = max(math.exp(min(th[q + 2], 700.0)), _SIGMA2_FLOOR)
                    if np.all(np.isfinite(e_beta)):  # else the E-step's likelihood is not finite: no candidate
                        e_state = estep(e_beta, e_s2, e_p, e_b)
                        if math.isfinite(e_state[4]):
                            cand = step(e_state)
                            it += 1
                            if math.isfinite(cand[4]) and cand[4] >= s2_[4]:
                                new = cand
            state = new
        else:
            state = step(state)
            it += 1
        rel = abs(state[4] - ll_old) / max(abs(ll_old), n)
        if rel < tol:
            converged = True
            break
    beta, s2, p, b = state[:4]
    return {"beta": beta, "s2": s2, "p": p, "b": b, "ll": state[4], "n_iter": it, "converged": converged, "rel": rel,
            "st": state[5][0]}


