RIGHT = {
    "ch04.halve_lr": '''from course_lib.check import ch04, show_solution


class HalveLR(Callback):
    def __init__(self, every=1):
        super().__init__()
        self.every = every

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        if args.cur_step_num % self.every == 0:
            lr = args.optimizer.learning_rate
            ops.assign(lr, Tensor(float(lr.asnumpy()) * 0.5, ms.float32))


ch04.halve_lr(HalveLR)
''',
    "ch04.early_stopping": '''class MyEarlyStopping(Callback):
    def __init__(self, evaluate, patience=2):
        super().__init__()
        self.evaluate = evaluate
        self.patience = patience
        self.best = None
        self.waited = 0

    def on_train_epoch_end(self, run_context):
        score = self.evaluate()
        if self.best is None or score > self.best:
            self.best = score
            self.waited = 0
        else:
            self.waited += 1
            if self.waited >= self.patience:
                run_context.request_stop()


ch04.early_stopping(MyEarlyStopping)
''',
    ("ch04.ex1", "ch04.ex2", "ch04.ex3", "ch04.ex4"): '''print("SCORES =", ch04.SCORES)
ch04.ex1([0.1, 0.1, 0.01, 0.01])     # fn runs after a step ends: step 1 (odd) keeps 0.1, step 2 cuts it
ch04.ex2(float(np.exp((np.log(2) + np.log(32)) / 2)))
ch04.ex3(round(2 * 40 / (2 * 40 + 10 + 20), 3))
ch04.ex4(6)
''',
}

WRONG = {
    "ch04.halve_lr": ('''from course_lib.check import ch04, show_solution


class HalveLR(Callback):
    def __init__(self, every=1):
        super().__init__()
        self.every = every
        self.steps = 0

    def on_train_step_end(self, run_context):
        self.steps += 1
        if self.steps % self.every == 0:
            lr = run_context.original_args().optimizer.learning_rate
            lr = Tensor(float(lr.asnumpy()) * 0.5, ms.float32)


ch04.halve_lr(HalveLR)
''', {"ch04.halve_lr": "学习率根本没有变"}),
    "ch04.early_stopping": ('''class MyEarlyStopping(Callback):
    def __init__(self, evaluate, patience=2):
        super().__init__()
        self.evaluate = evaluate
        self.patience = patience
        self.best = None
        self.waited = 0

    def on_train_epoch_end(self, run_context):
        score = self.evaluate()
        if self.best is None or score >= self.best:
            self.best = score
            self.waited = 0
        else:
            self.waited += 1
            if self.waited >= self.patience:
                run_context.request_stop()


ch04.early_stopping(MyEarlyStopping)
''', {"ch04.early_stopping": "分数持平被当成了进步"}),
    ("ch04.ex1", "ch04.ex2", "ch04.ex3", "ch04.ex4"): ('''print("SCORES =", ch04.SCORES)
ch04.ex1([0.1, 0.01, 0.01, 0.001])
ch04.ex2(float(np.exp((np.log(2) + np.log(32)) / 2)))
ch04.ex3(round(2 * 40 / (2 * 40 + 10 + 20), 3))
ch04.ex4(6)
''', {"ch04.ex1": "早一步变小"}),
}
