package adaptive
