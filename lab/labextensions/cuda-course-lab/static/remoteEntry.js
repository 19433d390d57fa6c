// The course's JupyterLab extension, written by hand as a module-federation container (no build
// step, no Node.js): JupyterLab 4 loads it from lab/labextensions (make lab passes
// --LabApp.extra_labextensions_path). CodeMirror picks a file's language from its extension alone
// and knows no .cu, and no Lab setting maps one; this plugin adds the extensions of its settings
// (default cu, cuh) to the C++ language and applies its editorConfig (default: 2-space indent) to
// the editors of those files. Settings > CUDA course changes both.
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "cuda-course-lab";
  var scope = null;

  function newest(versions) {  // the copy the core already loaded, else the highest version
    var keys = Object.keys(versions);
    var loaded = keys.filter(function (k) { return versions[k].loaded; });
    var pick = (loaded.length ? loaded : keys).sort(function (a, b) {
      var x = a.split(/[.-]/).map(Number), y = b.split(/[.-]/).map(Number);
      for (var i = 0; i < Math.max(x.length, y.length); i++) {
        if ((x[i] || 0) !== (y[i] || 0)) return (y[i] || 0) - (x[i] || 0);
      }
      return 0;
    })[0];
    return versions[pick];
  }

  function shared(name) {
    var versions = scope && scope[name];
    if (!versions) return Promise.reject(new Error(NAME + ": shared module " + name + " not found"));
    return Promise.resolve(newest(versions).get()).then(function (factory) { return factory(); });
  }

  function plugin(codemirror, settingregistry, fileeditor) {
    return {
      id: NAME + ":plugin",
      description: "Open .cu and .cuh files as C++ with the course's indentation.",
      autoStart: true,
      requires: [codemirror.IEditorLanguageRegistry, settingregistry.ISettingRegistry, fileeditor.IEditorTracker],
      activate: function (app, languages, registry, tracker) {
        var cpp = languages.findByName("C++");
        var config = { extensions: ["cu", "cuh"], editorConfig: { indentUnit: "2", tabSize: 2 } };
        function addExtensions() {
          if (!cpp) return;
          config.extensions.forEach(function (ext) {
            if (cpp.extensions.indexOf(ext) < 0) cpp.extensions.push(ext);
          });
        }
        function isCuda(path) {
          var dot = path.lastIndexOf(".");
          return dot >= 0 && config.extensions.indexOf(path.slice(dot + 1).toLowerCase()) >= 0;
        }
        function configure(widget) {
          if (!isCuda(widget.context.path)) return;
          widget.context.ready.then(function () {  // after the file editor's own settings
            widget.content.editor.setOptions(config.editorConfig);
            widget.node.setAttribute("data-course-indent", String(config.editorConfig.indentUnit));
          });
        }
        addExtensions();
        tracker.widgetAdded.connect(function (sender, widget) { configure(widget); });
        registry.load(NAME + ":plugin").then(function (settings) {
          function update() {
            config = settings.composite;
            addExtensions();
            tracker.forEach(configure);
          }
          update();
          settings.changed.connect(update);
        }).catch(function (reason) { console.warn(NAME + ": settings not loaded", reason); });
      }
    };
  }

  _JUPYTERLAB = window._JUPYTERLAB = window._JUPYTERLAB || {};
  _JUPYTERLAB[NAME] = {
    init: function (shareScope) { scope = shareScope; return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error(NAME + ": no module " + module));
      }
      return Promise.all([shared("@jupyterlab/codemirror"), shared("@jupyterlab/settingregistry"),
                          shared("@jupyterlab/fileeditor")]).then(function (mods) {
        var exports = { __esModule: true, default: [plugin(mods[0], mods[1], mods[2])] };
        return function () { return exports; };
      });
    }
  };
})();
