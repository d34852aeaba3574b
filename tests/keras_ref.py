#!/usr/bin/env python3
"""keras_ref.py - Keras' EarlyStopping, ReduceLROnPlateau and
ModelCheckpoint(save_best_only=True) as Keras 2.x writes them
(keras/callbacks.py; Keras 3's differ only in starting EarlyStopping's best
at None, which matters for a NaN in the first epoch), transcribed without
TensorFlow: numpy's comparisons, a model that is a learning rate and a stop
flag, the callbacks called in the order the test gives them.  The rate is a
Python float (a double); Keras keeps it in a float32 variable.
tests/control.t runs run() beside build/tests/ctltool on the same sequences.

    keras_ref.py MONITOR MODE EARLY_STOP PLATEAU LR < values
prints, per epoch, "EPOCH LR STOP BEST_SAVED" as ctltool does."""
import sys
import numpy as np


class Model:
    def __init__(self, lr):
        self.learning_rate = lr
        self.stop_training = False


def monitor_op(mode, monitor):
    """The comparison EarlyStopping and ModelCheckpoint choose: "better" is
    less for mode min, greater for max; for auto, greater when the metric's
    name says accuracy, else less."""
    if mode == "min":
        return np.less
    if mode == "max":
        return np.greater
    return np.greater if "acc" in monitor else np.less


class EarlyStopping:
    def __init__(self, model, monitor="val_loss", min_delta=0, patience=0, mode="auto",
                 baseline=None, start_from_epoch=0):
        self.model = model
        self.monitor = monitor
        self.patience = patience
        self.baseline = baseline
        self.min_delta = abs(min_delta)
        self.wait = 0
        self.stopped_epoch = 0
        self.start_from_epoch = start_from_epoch
        self.best = None
        self.best_epoch = 0
        self.monitor_op = monitor_op(mode, monitor)
        if self.monitor_op == np.less:
            self.min_delta *= -1

    def on_train_begin(self):
        self.wait = 0
        self.stopped_epoch = 0
        self.best_epoch = 0
        self.best = float("inf") if self.monitor_op == np.less else -float("inf")

    def on_epoch_end(self, epoch, logs):
        current = logs.get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def _is_improvement(self, monitor_value, reference_value):
        return self.monitor_op(monitor_value - self.min_delta, reference_value)


class ReduceLROnPlateau:
    def __init__(self, model, monitor="val_loss", factor=0.1, patience=10, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau does not support a factor >= 1.0.")
        self.model = model
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.cooldown = cooldown
        self.cooldown_counter = 0
        self.wait = 0
        self.best = 0
        self.mode = mode
        self.monitor_op = None
        self._reset()

    def _reset(self):
        if self.mode == "min" or (self.mode == "auto" and "acc" not in self.monitor):
            self.monitor_op = lambda a, b: np.less(a, b - self.min_delta)
            self.best = np.inf
        else:
            self.monitor_op = lambda a, b: np.greater(a, b + self.min_delta)
            self.best = -np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def on_epoch_end(self, epoch, logs):
        current = logs.get(self.monitor)
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = float(self.model.learning_rate)
                if old_lr > self.min_lr:
                    new_lr = old_lr * self.factor
                    new_lr = max(new_lr, self.min_lr)
                    self.model.learning_rate = new_lr
                    self.cooldown_counter = self.cooldown
                    self.wait = 0

    def in_cooldown(self):
        return self.cooldown_counter > 0


class ModelCheckpoint:
    def __init__(self, model, monitor="val_loss", mode="auto"):
        self.monitor = monitor
        self.monitor_op = monitor_op(mode, monitor)
        self.best = np.inf if self.monitor_op == np.less else -np.inf

    def on_epoch_end(self, epoch, logs):
        current = logs.get(self.monitor)
        if self.monitor_op(current, self.best):
            self.best = current
            return True
        return False


def settings(text, kinds):
    out = {}
    if text == "-":
        return None
    for kv in text.split(","):
        k, v = kv.split("=") if "=" in kv else ("patience", kv)
        out[k] = kinds[k](v)
    return out


def run(monitor, mode, es, rlr, lr, values):
    """The lines ctltool prints for these arguments and values."""
    out = []
    model = Model(float(lr))
    es = settings(es, {"patience": int, "min_delta": float, "baseline": float,
                       "start_from_epoch": int})
    rlr = settings(rlr, {"patience": int, "factor": float, "cooldown": int, "min_lr": float,
                         "min_delta": float})
    cbs = []
    if rlr is not None:
        cbs.append(ReduceLROnPlateau(model, monitor=monitor, mode=mode, **rlr))
    if es is not None:
        e = EarlyStopping(model, monitor=monitor, mode=mode, **es)
        e.on_train_begin()
        cbs.append(e)
    best = ModelCheckpoint(model, monitor=monitor, mode=mode)
    for epoch, v in enumerate(values):
        logs = {monitor: float(v)}
        saved = best.on_epoch_end(epoch, logs)
        for cb in cbs:
            cb.on_epoch_end(epoch, logs)
        out.append("%d %.17g %d %d" % (epoch, model.learning_rate, int(model.stop_training),
                                       int(saved)))
        if model.stop_training:
            break
    return out


if __name__ == "__main__":
    print("\n".join(run(*sys.argv[1:6], sys.stdin.read().split())))
