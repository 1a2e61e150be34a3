/* RDX explorer snapshot: click any image to enlarge it next to the selected one; arrow keys
 * step through its group, Esc or a click outside closes. */
(function () {
  'use strict';
  var META = JSON.parse(document.getElementById('snapshot-data').textContent);
  var modal = document.getElementById('modal'), box = document.getElementById('modal-box');
  var state = { ids: [], pos: 0, alone: true };
  function source(i) { return document.querySelector('[data-idx="' + i + '"]'); }
  function figure(i, title) {
    var f = document.createElement('figure'), src = source(i), im;
    if (src && src.tagName === 'IMG') { im = document.createElement('img'); im.src = src.src; }
    else { im = document.createElement('span'); im.className = 'ph'; im.textContent = '#' + i; }
    f.appendChild(im);
    var c = document.createElement('figcaption');
    c.textContent = title + ': ' + (META.captions[i] || ('#' + i));
    f.appendChild(c);
    return f;
  }
  function render() {
    box.innerHTML = '';
    var j = state.ids[state.pos];
    if (state.alone) { box.appendChild(figure(j, 'selected')); }
    else {
      box.appendChild(figure(META.selected, 'selected'));
      box.appendChild(figure(j, 'neighbour ' + (state.pos + 1) + '/' + state.ids.length));
    }
    modal.setAttribute('data-idx', String(j));
  }
  function open(ids, pos, alone) {
    state = { ids: ids, pos: pos, alone: alone };
    render();
    modal.classList.add('open');
  }
  Array.prototype.forEach.call(document.querySelectorAll('.main'), function (e) {
    e.addEventListener('click', function () { open([META.selected], 0, true); });
  });
  Array.prototype.forEach.call(document.querySelectorAll('section.group'), function (sec, g) {
    Array.prototype.forEach.call(sec.querySelectorAll('.nb'), function (e, pos) {
      e.addEventListener('click', function () { open(META.groups[g], pos, false); });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll('.selection .gi'), function (e, pos) {
    e.addEventListener('click', function () { open(META.selection, pos, true); });
  });
  modal.addEventListener('click', function (ev) { if (ev.target === modal) { modal.classList.remove('open'); } });
  document.addEventListener('keydown', function (ev) {
    if (!modal.classList.contains('open')) { return; }
    var n = state.ids.length;
    if (ev.key === 'Escape') { modal.classList.remove('open'); }
    else if (ev.key === 'ArrowRight') { state.pos = (state.pos + 1) % n; render(); }
    else if (ev.key === 'ArrowLeft') { state.pos = (state.pos + n - 1) % n; render(); }
  });
  document.body.setAttribute('data-ready', '1');
}());
