#include "decide/report_html.hpp"

#include <sstream>

namespace infrarsi::decide {

namespace {

/// Text safe inside a <script> element: "</" cannot end it early ("<\/" means the same in JSON
/// strings and in the JavaScript string literals where it can occur).
std::string script_safe(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/') {
      out += "<\\/";
      ++i;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  }
  return out;
}

// The page's own script: reads the report document, draws every section, records the status.
// Runs synchronously at the end of <body> with animations off, so the page is complete when
// the load event fires (headless Chromium's --dump-dom prints it then).
// Installed first, in <head>: collects every uncaught error and console.error of the page
// (Chart.js's own included) into #render-status.
constexpr const char* error_script = R"JS(
(function () {
  var status = { charts: {}, errors: [], done: false };
  window.__reportStatus = status;
  window.__reportFlush = function () {
    var e = document.getElementById('render-status');
    if (e) e.textContent = JSON.stringify(status);
  };
  window.addEventListener('error', function (e) {
    status.errors.push('error: ' + (e.message || String(e)));
    window.__reportFlush();
  });
  var origError = console.error;
  console.error = function () {
    var parts = [];
    for (var i = 0; i < arguments.length; ++i) parts.push(String(arguments[i]));
    status.errors.push('console.error: ' + parts.join(' '));
    window.__reportFlush();
    if (origError) origError.apply(console, arguments);
  };
})();
)JS";

constexpr const char* page_script = R"JS(
(function () {
  var status = window.__reportStatus;
  var flush = window.__reportFlush;

  var R = JSON.parse(document.getElementById('report-data').textContent);
  var COLORS = {
    ok: '#2b8a3e', contract_violation: '#c92a2a', oom: '#e67700', crash: '#862e9c',
    timeout: '#1864ab', launch_error: '#495057', lost: '#adb5bd', preempted: '#5c940d',
    unverified: '#868e96', unset: '#ced4da'
  };
  function color(v) { return COLORS[v] || '#212529'; }
  function num(v, d) { return (typeof v === 'number' && isFinite(v)) ? v.toFixed(d) : '\u2013'; }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function section(id) { return document.getElementById('sec-' + id); }
  function empty(name, why) {
    section(name).appendChild(el('p', { 'class': 'empty', 'data-empty': name }, why));
  }
  function drawn(canvas) {
    var ctx = canvas.getContext('2d');
    var w = canvas.width, h = canvas.height;
    if (!w || !h) return false;
    var px = ctx.getImageData(0, 0, w, h).data;
    var inked = 0;
    for (var i = 3; i < px.length; i += 4) if (px[i] !== 0) ++inked;
    return inked > 50;
  }
  function chart(name, config) {
    var box = el('div', { 'class': 'chart-box' });
    var canvas = el('canvas', { 'class': 'chart', id: 'chart-' + name, 'aria-label': name });
    box.appendChild(canvas);
    section(name).appendChild(box);
    config.options = config.options || {};
    config.options.animation = false;
    config.options.responsive = true;
    config.options.maintainAspectRatio = false;
    try {
      new Chart(canvas.getContext('2d'), config);
      var s = drawn(canvas) ? 'ok' : 'blank';
      canvas.setAttribute('data-render', s);
      status.charts[name] = s;
    } catch (e) {
      canvas.setAttribute('data-render', 'error: ' + e.message);
      status.charts[name] = 'error: ' + e.message;
      status.errors.push('chart ' + name + ': ' + e.message);
    }
    flush();
  }
  function hline(label, y, n, col, dash) {
    var data = [];
    for (var i = 0; i < n; ++i) data.push(y);
    return { type: 'line', label: label, data: data, borderColor: col, borderDash: dash || [],
             borderWidth: 1.5, pointRadius: 0, fill: false };
  }
  var GiB = 1024 * 1024 * 1024;

  // -- 1. best verified speedup vs trial -----------------------------------------------------
  (function () {
    var P = R.search_progress || [];
    if (!P.length) return empty('progress', 'No trial finished: nothing to plot.');
    var labels = P.map(function (p) { return p.trial_id + '.' + p.attempt; });
    var sp = P.filter(function (p) { return typeof p.speedup === 'number'; })
              .map(function (p) { return p.speedup; });
    var floor = Math.min.apply(null, sp.concat([R.noise_band ? R.noise_band.low : 1, 1])) - 0.05;
    var verdicts = [];
    P.forEach(function (p) { if (verdicts.indexOf(p.verdict) < 0) verdicts.push(p.verdict); });
    var ds = [];
    if (R.noise_band) {
      ds.push(hline('noise band (baseline \u00b11.96 sd)', R.noise_band.high, P.length,
                    'rgba(73,80,87,0.35)'));
      var low = hline('noise band low', R.noise_band.low, P.length, 'rgba(73,80,87,0.35)');
      low.fill = '-1'; low.backgroundColor = 'rgba(173,181,189,0.25)';
      ds.push(low);
      ds.push(hline('promotion bar', R.noise_band.promotion_bar, P.length, '#1864ab', [6, 4]));
    }
    ds.push({ type: 'line', label: 'best so far', data: P.map(function (p) { return p.best_so_far; }),
              borderColor: '#212529', stepped: true, pointRadius: 0, borderWidth: 2, fill: false,
              spanGaps: true });
    verdicts.forEach(function (v) {
      ds.push({ type: 'line', showLine: false, label: v + (v === 'ok' ? '' : ' (no speedup)'),
                data: P.map(function (p) {
                  if (p.verdict !== v) return null;
                  return typeof p.speedup === 'number' ? p.speedup : floor; }),
                backgroundColor: color(v), borderColor: color(v), pointRadius: 5,
                pointStyle: v === 'ok' ? 'circle' : 'triangle' });
    });
    chart('progress', {
      type: 'line',
      data: { labels: labels, datasets: ds },
      options: {
        plugins: {
          title: { display: true, text: 'Speedup over the baseline per trial (ID.ATTEMPT), best so far' },
          legend: { labels: { filter: function (i) { return i.text !== 'noise band low'; } } },
          tooltip: { callbacks: { afterLabel: function (c) {
            var p = P[c.dataIndex];
            return p ? (p.change || 'baseline') + ' (' + p.purpose + ')' : '';
          } } }
        },
        scales: { x: { title: { display: true, text: 'trial' } },
                  y: { title: { display: true, text: 'speedup (x)' } } }
      }
    });
  })();

  // -- 2. the time model's per-setting effects, prior vs revised --------------------------------
  (function () {
    var pr = R.prior_revision || {};
    var E = (pr.effects || []).filter(function (e) {
      return e.prior_speedup !== null || e.trials > 0; });
    if (!E.length) return empty('effects', 'No setting was measured and the priors said nothing about any: no effects to show.');
    var labels = E.map(function (e) { return e.feature; });
    var ds = [];
    if (pr.priors_given)
      ds.push({ type: 'bar', label: 'prior 95% interval',
                data: E.map(function (e) { return e.prior_low === null ? null : [e.prior_low, e.prior_high]; }),
                backgroundColor: 'rgba(230,119,0,0.35)', borderColor: '#e67700', borderWidth: 1 });
    ds.push({ type: 'bar', label: 'revised 95% interval',
              data: E.map(function (e) { return [e.posterior_low, e.posterior_high]; }),
              backgroundColor: 'rgba(24,100,171,0.35)', borderColor: '#1864ab', borderWidth: 1 });
    if (pr.priors_given)
      ds.push({ type: 'line', label: 'prior', showLine: false, pointStyle: 'rectRot', pointRadius: 5,
                data: E.map(function (e) { return e.prior_speedup; }), borderColor: '#e67700',
                backgroundColor: '#e67700' });
    ds.push({ type: 'line', label: 'revised', showLine: false, pointRadius: 5,
              data: E.map(function (e) { return e.posterior_speedup; }), borderColor: '#1864ab',
              backgroundColor: '#1864ab' });
    ds.push(hline('no effect', 1, E.length, '#868e96', [4, 4]));
    chart('effects', {
      type: 'bar',
      data: { labels: labels, datasets: ds },
      options: { plugins: { title: { display: true, text: pr.priors_given
                   ? 'Each setting alone: speedup the priors predicted and the time model after the run'
                   : 'Each setting alone: speedup the time model predicts after the run (no priors were given)' } },
                 scales: { y: { title: { display: true, text: 'speedup (x)' } } } }
    });
    if (!pr.priors_given)
      section('effects').appendChild(el('p', { 'class': 'note' },
        'The priors said nothing (no knowledge-base entry for this task): only the revised effects are shown.'));
  })();

  // -- 3. memory prices per setting ------------------------------------------------------------
  var MM = R.memory_model || {};
  (function () {
    if (!MM.fitted) return empty('memory-prices', 'No memory model: ' + (MM.why || 'no peak memory was measured') + '.');
    var M = MM.prices || [];
    if (!M.length) return empty('memory-prices', 'The memory model has no settings to price.');
    chart('memory-prices', {
      type: 'bar',
      data: { labels: M.map(function (m) { return m.feature; }), datasets: [
        { type: 'bar', label: '95% interval', data: M.map(function (m) { return [m.factor_low, m.factor_high]; }),
          backgroundColor: 'rgba(134,46,156,0.3)', borderColor: '#862e9c', borderWidth: 1 },
        { type: 'line', label: 'fitted factor', showLine: false, pointRadius: 5,
          data: M.map(function (m) { return m.factor; }), borderColor: '#862e9c', backgroundColor: '#862e9c' },
        hline('no change', 1, M.length, '#868e96', [4, 4]) ] },
      options: { plugins: { title: { display: true,
                   text: 'Peak memory per rank: factor of each setting alone (censored model, OOM trials as lower bounds)' },
                   tooltip: { callbacks: { afterLabel: function (c) {
                     var m = M[c.dataIndex]; return m ? ((m.bytes >= 0 ? '+' : '') + (m.bytes / GiB).toFixed(2) + ' GiB') : ''; } } } },
                 scales: { y: { type: 'logarithmic', title: { display: true, text: 'memory factor (x, log scale)' } } } }
    });
  })();

  // -- 4. the fitted OOM boundary against device memory --------------------------------------
  (function () {
    if (!MM.fitted) return empty('memory-boundary', 'No memory model: ' + (MM.why || 'no peak memory was measured') + '.');
    var T = (MM.trials || []).slice().sort(function (a, b) { return a.predicted_bytes - b.predicted_bytes; });
    if (!T.length) return empty('memory-boundary', 'No trial measured its peak memory or ran out of memory.');
    var labels = T.map(function (t) { return t.trial_id + '.' + t.attempt; });
    var cap = MM.capacity_bytes / GiB;
    // The axis ends a little above the capacity and the largest peak measured: the boundary is
    // what matters, and wide intervals of configurations far beyond it are clipped.
    var top = cap;
    T.forEach(function (t) { if (t.measured_bytes !== null) top = Math.max(top, t.measured_bytes / GiB); });
    top = Math.ceil(top * 1.5);
    var ds = [
      { type: 'bar', label: 'predicted peak, 95% interval',
        data: T.map(function (t) { return [t.predicted_low / GiB, t.predicted_high / GiB]; }),
        backgroundColor: 'rgba(24,100,171,0.25)', borderColor: '#1864ab', borderWidth: 1 },
      { type: 'line', label: 'predicted peak', showLine: false, pointRadius: 3,
        data: T.map(function (t) { return t.predicted_bytes / GiB; }), borderColor: '#1864ab', backgroundColor: '#1864ab' },
      { type: 'line', label: 'measured peak', showLine: false, pointRadius: 5,
        data: T.map(function (t) { return t.measured_bytes === null ? null : t.measured_bytes / GiB; }),
        borderColor: color('ok'), backgroundColor: color('ok') },
      { type: 'line', label: 'out of memory (peak above the capacity)', showLine: false, pointRadius: 7,
        pointStyle: 'triangle', data: T.map(function (t) { return t.oom ? cap : null; }),
        borderColor: color('oom'), backgroundColor: color('oom') },
      hline((MM.capacity_inferred ? 'capacity (inferred: largest peak that fitted) ' : 'device memory ') +
            cap.toFixed(1) + ' GiB', cap, T.length, '#c92a2a', [6, 3])
    ];
    chart('memory-boundary', {
      type: 'bar',
      data: { labels: labels, datasets: ds },
      options: { plugins: { title: { display: true,
                   text: 'Peak memory per rank by trial, ordered by the fitted model: the OOM boundary is where the prediction crosses the capacity' } },
                 scales: { x: { title: { display: true, text: 'trial (ordered by predicted peak)' } },
                           y: { min: 0, max: top, title: { display: true, text: 'GiB per rank' } } } }
    });
  })();

  // -- 5. failed device-seconds by outcome -----------------------------------------------------
  (function () {
    var F = R.failed_trials_cost || {};
    var keys = Object.keys(F);
    if (!keys.length) return empty('failed-cost', 'No failed trials: no device-seconds lost to failures.');
    chart('failed-cost', {
      type: 'bar',
      data: { labels: keys, datasets: [{ label: 'device-seconds',
        data: keys.map(function (k) { return F[k].device_seconds; }),
        backgroundColor: keys.map(color) }] },
      options: { plugins: { legend: { display: false }, title: { display: true,
                   text: 'Device-seconds spent on failed trials, by outcome (of ' +
                         num(R.device_seconds_total, 1) + ' in all)' },
                   tooltip: { callbacks: { afterLabel: function (c) { return F[keys[c.dataIndex]].trials + ' trial(s)'; } } } },
                 scales: { y: { title: { display: true, text: 'device-seconds' } } } }
    });
  })();

  // -- 6. prior vs measured speedups -----------------------------------------------------------
  (function () {
    var pr = R.prior_revision || {};
    var P = pr.points || [];
    if (P.length < 1) return empty('prior-vs-measured', 'No usable search trial: nothing to compare the predictions with.');
    function rho(v) { return typeof v === 'number' ? v.toFixed(2) : 'n/a'; }
    var all = [];
    P.forEach(function (p) { all.push(p.measured_speedup, p.posterior_speedup, p.prior_speedup); });
    var lo = Math.min.apply(null, all) * 0.97, hi = Math.max.apply(null, all) * 1.03;
    var ds = [];
    if (pr.priors_given)
      ds.push({ type: 'scatter', label: 'priors alone (Spearman ' + rho(pr.spearman_prior) + ')',
                data: P.map(function (p) { return { x: p.prior_speedup, y: p.measured_speedup }; }),
                backgroundColor: '#e67700', pointRadius: 5, pointStyle: 'rectRot' });
    ds.push({ type: 'scatter', label: 'revised time model, trials before (Spearman ' + rho(pr.spearman_posterior) + ')',
              data: P.map(function (p) { return { x: p.posterior_speedup, y: p.measured_speedup }; }),
              backgroundColor: '#1864ab', pointRadius: 5 });
    ds.push({ type: 'line', label: 'prediction = measurement', data: [{ x: lo, y: lo }, { x: hi, y: hi }],
              borderColor: '#868e96', borderDash: [4, 4], pointRadius: 0, fill: false });
    chart('prior-vs-measured', {
      type: 'scatter',
      data: { datasets: ds },
      options: { plugins: { title: { display: true, text: 'Predicted vs measured speedup of the ' + P.length +
                   ' usable search trials' + (pr.priors_given ? '' : ' (the priors said nothing)') } },
                 scales: { x: { type: 'linear', min: lo, max: hi, title: { display: true, text: 'predicted speedup (x)' } },
                           y: { min: lo, max: hi, title: { display: true, text: 'measured speedup (x)' } } } }
    });
  })();

  // -- 7. the promoted change and its attribution ----------------------------------------------
  (function () {
    var p = R.promoted;
    if (!p || typeof p !== 'object')
      return empty('promoted', 'Nothing promoted: ' + ((R.promotion_decision || {}).reason || 'no candidate') + '.');
    var parts = (p.attribution || {}).parts || [];
    var labels = parts.map(function (q) { return q.feature; }).concat(['promoted (verified)']);
    var n = labels.length;
    var iv = parts.map(function (q) { return q.model_low === null ? null : [q.model_low, q.model_high]; });
    iv.push([p.ci_low, p.ci_high]);
    var mid = parts.map(function (q) { return q.model_speedup; }); mid.push(p.speedup);
    var alone = parts.map(function (q) { return q.measured_alone; }); alone.push(null);
    // The minimal-change ablation that undid a setting: the bundle's speedup over the speedup
    // without it (what the setting is worth inside the bundle, as measured).
    var bundle = (p.minimal_change || {}).bundle_speedup;
    var ablated = parts.map(function (q) {
      return q.ablation && q.ablation.speedup_without && bundle ? bundle / q.ablation.speedup_without : null;
    }); ablated.push(null);
    chart('promoted', {
      type: 'bar',
      data: { labels: labels, datasets: [
        { type: 'bar', label: '95% interval (model per setting; re-verification for the whole)', data: iv,
          backgroundColor: labels.map(function (l, i) { return i === n - 1 ? 'rgba(43,138,62,0.45)' : 'rgba(24,100,171,0.3)'; }),
          borderColor: labels.map(function (l, i) { return i === n - 1 ? '#2b8a3e' : '#1864ab'; }), borderWidth: 1 },
        { type: 'line', label: 'estimate', showLine: false, pointRadius: 6, data: mid,
          borderColor: '#212529', backgroundColor: '#212529' },
        { type: 'line', label: 'measured alone (a trial with only this change)', showLine: false, pointRadius: 6,
          pointStyle: 'triangle', data: alone, borderColor: '#e67700', backgroundColor: '#e67700' },
        { type: 'line', label: 'ablation: bundle / bundle without it', showLine: false, pointRadius: 7,
          pointStyle: 'crossRot', data: ablated, borderColor: '#c92a2a', backgroundColor: '#c92a2a' },
        hline('no effect', 1, n, '#868e96', [4, 4]) ] },
      options: { plugins: { title: { display: true, text: 'Promoted: ' + p.change + ' \u2014 ' + num(p.speedup, 3) +
                   'x [' + num(p.ci_low, 3) + ', ' + num(p.ci_high, 3) + ']' } },
                 scales: { y: { title: { display: true, text: 'speedup (x)' } } } }
    });
  })();

  // -- tables ----------------------------------------------------------------------------------
  (function () {
    var T = R.top_configurations || [];
    var sec = section('top');
    if (!T.length) return empty('top', 'No trial finished.');
    var mfuNote = (R.mfu || {}).reason;
    var table = el('table', { id: 'top-table' });
    var head = el('tr');
    ['#', 'trial', 'configuration (change from the baseline)', 's/step', 'speedup', 'tokens/s', 'MFU',
     'peak memory (GiB)', 'outcome'].forEach(function (h) { head.appendChild(el('th', {}, h)); });
    table.appendChild(head);
    T.forEach(function (t) {
      var tr = el('tr', { 'class': 'verdict-' + t.verdict });
      [String(t.rank), t.trial_id + '.' + t.attempt, t.change || 'baseline',
       t.step_time_s > 0 ? num(t.step_time_s, 4) : '\u2013',
       typeof t.speedup === 'number' ? t.speedup.toFixed(3) + 'x' : '\u2013',
       typeof t.tokens_per_s === 'number' ? Math.round(t.tokens_per_s).toLocaleString('en-US') : '\u2013',
       typeof t.mfu === 'number' ? (100 * t.mfu).toFixed(1) + '%' : '\u2013',
       t.peak_memory_bytes > 0 ? (t.peak_memory_bytes / GiB).toFixed(2) : '\u2013', t.verdict
      ].forEach(function (v, i) {
        var td = el('td', {}, v);
        if (i === 8) td.style.color = color(t.verdict);
        tr.appendChild(td);
      });
      table.appendChild(tr);
    });
    sec.appendChild(table);
    if (T.every(function (t) { return t.mfu === null; }) && mfuNote)
      sec.appendChild(el('p', { 'class': 'note' }, 'MFU not computed: ' + mfuNote + '.'));
  })();
  (function () {
    var p = R.promoted;
    var sec = section('paths');
    if (!p || typeof p !== 'object') return empty('paths', 'Nothing promoted: no source path is touched.');
    var pp = p.patch_paths || {};
    var names = Object.keys(pp);
    if (!names.length) {
      var touched = p.touched_at_apply || [];
      if (!touched.length) return empty('paths', 'The promoted change applies no patch: launch settings only.');
      names = ['(as the apply stage logged them)']; pp = {}; pp[names[0]] = touched;
    }
    var ul = el('ul', { id: 'patch-paths' });
    names.forEach(function (n) {
      (pp[n] || []).forEach(function (path) {
        var li = el('li');
        li.appendChild(el('code', {}, path));
        li.appendChild(document.createTextNode(' (' + n + ')'));
        ul.appendChild(li);
      });
    });
    sec.appendChild(ul);
  })();

  (function () {
    // Only in a report whose run was served experience seeds (render_html adds the section).
    var S = R.experience_seeds || [];
    var sec = section('experience');
    if (!sec) return;
    var table = el('table', { id: 'experience-table' });
    var head = el('tr');
    ['seed', 'from', 'match', 'speedup there', 'configuration (change from the baseline)',
     'here'].forEach(function (h) { head.appendChild(el('th', {}, h)); });
    table.appendChild(head);
    S.forEach(function (s, i) {
      var tr = el('tr', { 'class': 'seed' });
      var here = s.trial !== undefined
        ? 'trial ' + s.trial + ', ' + s.outcome +
          (typeof s.speedup === 'number' ? ' ' + s.speedup.toFixed(3) + 'x' : '')
        : 'not proposed: ' + (s.reason || '');
      [String(i + 1), s.origin_hardware || '\u2013', s.match || '\u2013',
       typeof s.speedup_there === 'number' ? s.speedup_there.toFixed(3) + 'x' : '\u2013',
       s.change || 'baseline', here].forEach(function (v) { tr.appendChild(el('td', {}, v)); });
      table.appendChild(tr);
    });
    sec.appendChild(table);
    var e = R.experience || {};
    if (e.mode)
      sec.appendChild(el('p', { 'class': 'note' }, 'Served mode: ' + e.mode + '; ' +
        (e.proposed || 0) + ' of ' + (e.served || 0) + ' seed(s) proposed in the initial design.'));
  })();

  status.done = true;
  flush();
  document.body.setAttribute('data-rendered', 'true');
})();
)JS";

} // namespace

std::string render_html(const nlohmann::json& r, const std::string& chart_js) {
  auto text = [&](const char* key) {
    return r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : std::string{};
  };
  std::string summary;
  if (r.contains("promoted") && r["promoted"].is_object()) {
    const auto& p = r["promoted"];
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(3);
    os << "Promoted: " << p.value("change", std::string{}) << " — verified speedup "
       << p.value("speedup", 1.0) << "x, 95% interval [" << p.value("ci_low", 0.0) << ", "
       << (p.contains("ci_high") && p["ci_high"].is_number() ? p["ci_high"].get<double>() : 0.0)
       << "] from " << p.value("pairs", 0) << " interleaved pairs.";
    summary = os.str();
  } else {
    const auto& d = r.contains("promotion_decision") ? r["promotion_decision"] : nlohmann::json{};
    summary = "Nothing promoted: "
              + (d.is_object() ? d.value("reason", std::string{"no candidate"})
                               : std::string{"no candidate"});
  }
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>InfraRSI report: " << html_escape(text("task")) << " (run "
    << html_escape(text("run")) << ")</title>\n"
    << "<style>\n"
       "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;"
       "max-width:1100px;color:#212529;padding:0 16px}\n"
       "h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #dee2e6}\n"
       ".chart-box{position:relative;height:360px}\n"
       ".empty{color:#868e96;font-style:italic}.note{color:#495057;font-size:.9em}\n"
       "table{border-collapse:collapse;font-size:.9em;width:100%}"
       "th,td{border:1px solid #dee2e6;padding:4px 8px;text-align:right}"
       "td:nth-child(3),th:nth-child(3){text-align:left}th{background:#f1f3f5}\n"
       "#render-status{display:none}\n"
       ".summary{font-size:1.1em;padding:8px 12px;background:#f1f3f5;border-left:4px solid "
       "#2b8a3e}\n"
       "</style>\n"
    << "<script>" << error_script << "</script>\n"
    << "</head>\n<body>\n"
    << "<h1>InfraRSI report: " << html_escape(text("task")) << "</h1>\n"
    << "<p class=\"note\">run <code>" << html_escape(text("run")) << "</code> · contract "
    << html_escape(text("contract_hash").substr(0, 16)) << " · "
    << html_escape(text("clock_check")) << "</p>\n"
    << "<p class=\"summary\" id=\"summary\">" << html_escape(summary) << "</p>\n"
    << "<h2>Best verified speedup by trial</h2><div id=\"sec-progress\"></div>\n"
    << "<h2>Top configurations</h2><div id=\"sec-top\"></div>\n"
    << "<h2>The promoted change and its parts</h2><div id=\"sec-promoted\"></div>\n"
    << "<h2>Source paths of the promoted patches</h2><div id=\"sec-paths\"></div>\n"
    << "<h2>Per-setting effects: prior and revised time model</h2><div id=\"sec-effects\"></div>\n"
    << "<h2>Predicted vs measured speedups</h2><div id=\"sec-prior-vs-measured\"></div>\n"
    << "<h2>Memory price of each setting</h2><div id=\"sec-memory-prices\"></div>\n"
    << "<h2>Peak memory and the OOM boundary</h2><div id=\"sec-memory-boundary\"></div>\n"
    << "<h2>Cost of failed trials</h2><div id=\"sec-failed-cost\"></div>\n"
    << (r.contains("experience_seeds") && r["experience_seeds"].is_array()
          ? "<h2>Experience seeds</h2><div id=\"sec-experience\"></div>\n"
          : "")
    << "<p class=\"note\">report.json and report.md beside this file hold every trial, the "
       "re-verifications and every rejection with its evidence.</p>\n"
    << "<pre id=\"render-status\">{\"done\":false}</pre>\n"
    << "<script type=\"application/json\" id=\"report-data\">" << script_safe(r.dump())
    << "</script>\n"
    << "<script>\n" << script_safe(chart_js) << "\n</script>\n"
    << "<script>" << page_script << "</script>\n"
    << "</body>\n</html>\n";
  return h.str();
}

} // namespace infrarsi::decide
