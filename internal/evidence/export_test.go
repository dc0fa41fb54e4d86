package evidence

// ShapeCheck turns the shape check on and off (on unless a test says).
var ShapeCheck = &shapeCheck
